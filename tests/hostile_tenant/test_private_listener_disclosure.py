"""The private listener shows each caller only what it may see: anonymous callers nothing with a
name on it (every route, swept, as tests/test_public_names_no_one.py sweeps the public listener's),
a signed-in tenant its own names and no one else's, an operator everything, and Prometheus its
targets and metrics with its token only.

The history is the public listener's test's (tenants, an operator and workers have all acted, and
written their names into reasons), with a report of a broken node from each tenant in words of its own.
"""

import re

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import URLPattern

from fleet.models import ConfigDrive, Node
from remediation.models import Remediation
from reservations.models import Reservation, Tenant
from reservations.services import report_node
from tests.support.api import key_client, member_key
from tests.support.urls import patterns
from tests.test_public_names_no_one import (
    OPERATOR,
    RESERVATION_ID,
    TENANTS,
    claims_of,
    filled,
    forbidden_names,
    named_history,
)

PRIVATE = "gpufleet.urls"
# What each tenant wrote in its report of a broken node: for operators only.
REPORTS = {"zyxcorp": "zyxcorp says kumquat ledger overheats", "qwvinc": "qwvinc says marmalade fan rattles"}
PAGES = ["/", "/nodes/node-001", "/incidents", "/remediations"]
VIEWER_API = ["/v1/nodes", "/v1/nodes/node-001", "/v1/remediations"]
SCRAPES = ["/v1/prometheus/targets", "/metrics", "/metrics/fleet"]
LOGIN = "/accounts/login/?next="

__all__ = ["named_history"]  # the fixture, used by name


@pytest.fixture
def reported(named_history):
    """Each tenant reports one of its serving nodes broken, in words of its own."""
    for name, words in REPORTS.items():
        tenant = Tenant.objects.get(name=name)
        node = Node.objects.filter(tenant=tenant, state="active").order_by("name").first()
        assert node is not None, name
        report_node(node=node, tenant=tenant, description=words)


def forbidden_words() -> dict[str, str]:
    return forbidden_names() | {words: "a tenant's report" for words in REPORTS.values()}


def every_path(pattern: URLPattern, route: str) -> list[str]:
    """The route with its parameters filled by every real node and incident, and by made-up
    values elsewhere (a config drive's token is a credential: never a real one here)."""
    if route.startswith("^") or "(?P<" in route:  # the admin's regular expressions
        route = re.sub(r"\(\?P<\w+>[^)]*\)", "1", route).replace("^", "").replace("$", "").replace("\\", "")
    route = re.sub(r"<int:\w+>", "1", route.replace("<str:token>", "not-a-drive-token"))
    route = route.replace("<str:node>", "node-001").replace("<path:object_id>", "1")
    return filled("/" + route)


def swept(client, *, admin: bool = True):
    """(path, answer, what it shows) of every route of the private listener (the admin's only if
    `admin`), GET, every real parameter."""
    for route, pattern in patterns(PRIVATE):
        if not admin and route.startswith("admin/"):
            continue
        for path in every_path(pattern, route):
            answer = client.get(path)
            yield path, answer, answer.content.decode(errors="replace") + answer.get("Location", "")


def leaks(body: str, names: dict[str, str]) -> set[str]:
    found = {f"{what} {name!r}" for name, what in names.items() if name in body}
    return found | {repr(number) for number in RESERVATION_ID.findall(body)}


def test_anonymous_callers_get_nothing_with_a_name_from_any_route(client, reported):
    names = forbidden_words()
    assert {*TENANTS, OPERATOR, *REPORTS.values()} <= set(names)
    leaked, answered = set(), 0
    for path, answer, shown in swept(client):
        answered += 1
        leaked |= {f"{path} shows {leak}" for leak in leaks(shown + claims_of(shown), names)}
        assert answer.status_code < 500, path
    assert answered > 100
    assert not leaked, "\n".join(sorted(leaked))


def test_anonymous_browsers_are_sent_to_the_login_page_and_api_callers_get_401(client, reported):
    incident = Remediation.objects.order_by("pk").first()
    assert incident is not None
    for page in [*PAGES, f"/incidents/remediation-{incident.pk}/replay", "/?state=active"]:
        answer = client.get(page)
        assert answer.status_code == 302 and answer["Location"].startswith(LOGIN), page
    for path in [*VIEWER_API, *SCRAPES]:
        answer = client.get(path)
        assert answer.status_code == 401 and set(answer.json()) == {"detail"}, path
        assert answer.has_header("WWW-Authenticate"), path


def test_the_anonymous_routes_that_stay_open_still_answer(client, reported):
    drive = ConfigDrive.objects.first()
    for path in ["/healthz", "/accounts/login/", "/v1/capacity", "/v1/images", "/v1/attestation/keys", "/v1/schema"]:
        assert client.get(path).status_code == 200, path
    if drive is not None:
        assert client.get(f"/v1/config-drives/{drive.token}").status_code == 200


def client_as(client, username: str):
    client.force_login(get_user_model().objects.get(username=username))
    return client


def test_a_signed_in_tenant_sees_its_own_nodes_by_name_and_no_one_elses(client, reported):
    zyxcorp = Tenant.objects.get(name="zyxcorp")
    client_as(client, "tenant-zyxcorp")
    own = set(Reservation.objects.filter(tenant=zyxcorp).values_list("pk", flat=True))
    names = {name: what for name, what in forbidden_words().items() if "zyxcorp" not in name}
    assert {"qwvinc", OPERATOR, REPORTS["qwvinc"]} <= set(names)
    leaked = set()
    for path, _, shown in swept(client, admin=False):  # the admin sends a tenant to its login as anyone
        found = leaks(shown + claims_of(shown), names)
        found -= {repr(n) for n in RESERVATION_ID.findall(shown) if int(re.sub(r"\D", "", n)) in own}
        leaked |= {f"{path} shows {leak}" for leak in found}
    assert not leaked, "\n".join(sorted(leaked))

    held = Node.objects.filter(tenant=zyxcorp).order_by("name").first()
    others = Node.objects.filter(tenant__name="qwvinc").order_by("name").first()
    assert held is not None and others is not None
    floor = client.get("/").content.decode()
    assert f"{held.name} · {held.state} · tenant zyxcorp" in floor
    assert f"{others.name} · {others.state} · in use" in floor
    assert "<dt>Tenant</dt><dd>zyxcorp</dd>" in client.get(f"/nodes/{held.name}").content.decode()
    assert "<dt>Tenant</dt><dd>in use</dd>" in client.get(f"/nodes/{others.name}").content.decode()
    own_report = Node.objects.get(audit_events__event="tenant_report", audit_events__actor="tenant:zyxcorp")
    assert REPORTS["zyxcorp"] in client.get(f"/nodes/{own_report.name}").content.decode()
    reasons = [node["quarantine_reason"] for node in client.get("/v1/nodes?limit=1000").json()["results"]]
    assert "operator_quarantine: zyxcorp reports GPU 2 flaky (tenant:zyxcorp); [operator] to check" in reasons
    assert f"tenant_report: {REPORTS['qwvinc']}" not in reasons


def test_an_operator_sees_everything(client, reported):
    client_as(client, OPERATOR)
    floor = client.get("/").content.decode()
    assert all(f"· tenant {name}" in floor for name in TENANTS)
    for name, words in REPORTS.items():
        node = Node.objects.get(audit_events__event="tenant_report", audit_events__actor=f"tenant:{name}")
        assert words in client.get(f"/nodes/{node.name}").content.decode()
        assert client.get(f"/v1/nodes/{node.name}").json()["quarantine_reason"] == f"tenant_report: {words}"
    quarantined = Node.objects.get(
        audit_events__actor=f"operator:{OPERATOR}", audit_events__event="operator_quarantine"
    )
    assert f"<td>operator:{OPERATOR}</td>" in client.get(f"/nodes/{quarantined.name}").content.decode()
    for path in [*VIEWER_API, *SCRAPES]:
        assert client.get(path).status_code == 200, path


def test_an_operators_key_as_a_member_of_an_organisation_sees_what_the_organisation_sees(reported):
    """A key acts for its organisation: one made by an operator who is also a member shows that
    organisation's view, not the operator's (who signs in for that)."""
    key = key_client(member_key("zyxcorp", OPERATOR, "admin", scope="read"))
    for path in VIEWER_API:
        shown = key.get(path).content.decode()
        assert REPORTS["qwvinc"] not in shown and "qwvinc" not in shown, path
    reasons = [node["quarantine_reason"] for node in key.get("/v1/nodes?limit=1000").json()["results"]]
    # Its maker is a member: the organisation sees its own member's name where a tenant sees "[operator]".
    assert "operator_quarantine: zyxcorp reports GPU 2 flaky (tenant:zyxcorp); opalice to check" in reasons


def test_prometheus_reads_its_targets_and_metrics_with_its_token_and_nothing_without(client, reported, settings):
    settings.GPUFLEET_PROMETHEUS_TOKEN = "a-prometheus-token-for-this-test"
    bearer = {"Authorization": "Bearer a-prometheus-token-for-this-test"}
    targets = client.get("/v1/prometheus/targets", headers=bearer)
    assert targets.status_code == 200 and {target["labels"]["node"] for target in targets.json()}
    assert "gpufleet_nodes{" in client.get("/metrics/fleet", headers=bearer).content.decode()
    assert "django_http_requests" in client.get("/metrics", headers=bearer).content.decode()
    for path in SCRAPES:
        for headers in [
            {},
            {"Authorization": "Bearer gpufleet-development-prometheus-token"},
            {"Authorization": "Token x"},
        ]:
            answer = client.get(path, headers=headers)
            assert answer.status_code == 401 and set(answer.json()) == {"detail"}, (path, headers)
    # Its token opens nothing else, and a tenant signed in reads none of Prometheus's.
    for path in [*PAGES, *VIEWER_API]:
        assert client.get(path, headers=bearer).status_code in (302, 401), path
    client_as(client, "tenant-zyxcorp")
    for path in SCRAPES:
        assert client.get(path).status_code in (401, 403), path


def test_the_development_prometheus_token_is_the_default_and_check_deploy_warns_of_it():
    from gpufleet.checks import development_secrets

    assert settings.GPUFLEET_PROMETHEUS_TOKEN == settings.DEVELOPMENT_PROMETHEUS_TOKEN
    assert "gpufleet.W005" in {problem.id for problem in development_secrets(None)}
