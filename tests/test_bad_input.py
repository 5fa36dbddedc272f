"""No input is a 500: text PostgreSQL cannot store and numbers in other scripts' digits are a
400 `{"detail": ...}` on both listeners, on the API and the pages, and hypothesis walks every
route of both with hostile query strings and path values to find what is left."""

import json
import re
from urllib.parse import quote, urlencode

import hypothesis
import pytest
from django.test import Client, override_settings
from hypothesis import strategies as st

from reservations.models import Tenant
from tests.support.api import post, tenant_client
from tests.support.examples import examples
from tests.support.factories import enrol_default_fleet, make_available, xid_under_a_tenant
from tests.support.hostile import HOSTILE_TEXT
from tests.support.urls import patterns

LISTENERS = ["gpufleet.urls", "gpufleet.urls_public"]


@pytest.fixture
def client(admin_client):
    """An operator signed in, so that the private listener's pages and node reads run rather than
    send the caller to the login page (console/pages/viewers.py)."""
    return admin_client


NUL_MESSAGE = "must not contain the NUL character (U+0000)"


def test_a_nul_in_a_reservation_request_is_a_400_naming_the_field(fleet):
    tenant = tenant_client("acme")
    answer = post(tenant, "/v1/reservations", '{"node_count": 1, "pod": "p\\u0000"}')
    assert answer.status_code == 400
    assert answer.json() == {"detail": f"pod: {NUL_MESSAGE}"}
    answer = post(tenant, "/v1/reservations", '{"node_count": 1, "p\\u0000d": "p1"}')
    assert answer.status_code == 400 and answer.json()["detail"] == f"object: a name {NUL_MESSAGE}"


def test_a_lone_surrogate_in_a_body_is_a_400(fleet):
    answer = post(tenant_client("acme"), "/v1/reservations", '{"node_count": 1, "pod": "\\udc00"}')
    assert answer.status_code == 400 and "lone surrogate" in answer.json()["detail"]


def test_json_nested_past_the_parsers_depth_is_a_400(fleet):
    answer = post(tenant_client("acme"), "/v1/reservations", "[" * 100_000 + "]" * 100_000)
    assert answer.status_code == 400 and answer.json()["detail"] == "malformed JSON: nested too deeply"


@pytest.mark.parametrize("urlconf", LISTENERS)
@pytest.mark.parametrize("path", ["/v1/nodes?pod=%00", "/v1/nodes?rack=%00", "/?pod=%00", "/?rack=r01%00"])
def test_a_nul_in_a_query_parameter_is_a_400_on_both_listeners(client, fleet, urlconf, path):
    with override_settings(ROOT_URLCONF=urlconf):
        answer = client.get(path)
    assert answer.status_code == 400
    assert answer.json()["detail"].endswith(NUL_MESSAGE)


def test_a_nul_in_the_path_or_a_cookie_is_a_400(client, fleet):
    assert client.get("/admin/fleet/node/%00/change/").status_code == 400
    # A quoted cookie may spell a NUL in octal; the session's lookup would then fail before any login.
    for path in ("/admin/", "/my/reservations"):
        answer = client.get(path, HTTP_COOKIE='sessionid="\\000abcdefghijklmnop"')
        assert answer.status_code == 400 and answer.json()["detail"] == f"cookie 'sessionid': {NUL_MESSAGE}"


@pytest.fixture
def incident(transactional_db):
    make_available(enrol_default_fleet())
    applied, _, _ = xid_under_a_tenant(Tenant.objects.create(name="acme"))
    return f"remediation-{applied.pk}"


def test_the_replay_step_is_read_in_ascii_digits_only(client, incident):
    url = f"/incidents/{incident}/replay"
    assert client.get(f"{url}?step=1").status_code == 200
    assert client.get(f"{url}?step={'9' * 40}").status_code == 200  # past the last step: the last step
    for step in ["%C2%B2", "-1", "%EF%BC%91", "one", ""]:
        answer = client.get(f"{url}?step={step}")
        assert answer.status_code == 400, step
        assert answer.json()["detail"].startswith("step: ")


def test_pages_of_a_list_are_read_in_ascii_digits_only(client, fleet):
    assert len(client.get("/v1/nodes?limit=5&offset=2").json()["results"]) == 5
    assert len(client.get("/v1/nodes?limit=99999999999999999999").json()["results"]) == len(fleet)  # capped at 1000
    assert client.get("/v1/nodes?offset=99999999999999999999").json()["results"] == []
    for query in ["limit=%C2%B2", "limit=0", "limit=-1", "offset=%C2%B2", "offset=1e3", "limit=%EF%BC%91"]:
        answer = client.get(f"/v1/nodes?{query}")
        assert answer.status_code == 400, query
        assert answer.json()["detail"].split(":")[0] in ("limit", "offset"), query


# -- every route of both listeners, swept and fuzzed ---------------------------------------

# One representative of each class of trouble, in every parameter a view here reads (and in one
# no view reads, and as a parameter's name), one at a time: a parameter that a view checks first
# would otherwise hide the others behind its own 400.
SWEPT_NAMES = ["pod", "rack", "state", "step", "limit", "offset", "unread"]
SWEPT_VALUES = ["\x00", "\u00b2", "9" * 30, "\ud800"]
SWEPT_QUERIES = [[(name, value)] for name in SWEPT_NAMES for value in SWEPT_VALUES] + [[(v, "1")] for v in SWEPT_VALUES]
# What hypothesis draws from beyond that, on every route, the admin's too.
PARAMETER_NAMES = [*SWEPT_NAMES, "format", "q", "o", "p", "e", "next", "_changelist_filters"]
QUERY = st.lists(st.tuples(st.sampled_from(PARAMETER_NAMES) | HOSTILE_TEXT, HOSTILE_TEXT), max_size=3)
CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def routes(urlconf: str) -> list[str]:
    return [route.replace("^", "").replace("$", "") for route, _ in patterns(urlconf)]


def path_for(route: str, value_of) -> str:
    """The path of `route` with each converter's value `value_of(name)`, percent-encoded."""

    def value(match: re.Match) -> str:
        return quote(value_of(match.group(2) or match.group(3)), safe="", errors="surrogatepass")

    return "/" + CONVERTER.sub(value, route)


def get(client: Client, path: str, query: list) -> str | None:
    """GET path?query; what went wrong, or None if the answer was no server error."""
    answer = client.get(f"{path}?{urlencode(query, errors='surrogatepass')}")
    if answer.status_code >= 500:
        return f"{path}?{query}: {answer.status_code} {answer.content[:200]!r}"
    if answer.status_code == 400 and answer["Content-Type"].startswith("application/json"):
        assert "detail" in json.loads(answer.content), path
    return None


def sweep_and_fuzz(client: Client, urlconf: str, known: dict[str, str]) -> None:
    every = routes(urlconf)
    ours = [route for route in every if not route.startswith("admin/")]
    with override_settings(ROOT_URLCONF=urlconf):
        failures = [
            get(client, path_for(route, lambda n: known.get(n, "1")), q) for route in ours for q in SWEPT_QUERIES
        ]
        for route in ours:
            for name in {m.group(2) or m.group(3) for m in CONVERTER.finditer(route)}:
                for hostile in SWEPT_VALUES:
                    path = path_for(
                        route, lambda n, name=name, hostile=hostile: hostile if n == name else known.get(n, "1")
                    )
                    failures.append(get(client, path, []))
        assert "\n".join(f for f in failures if f) == ""

        @hypothesis.settings(max_examples=examples(150), deadline=None, database=None)
        @hypothesis.given(st.sampled_from(ours) | st.sampled_from(every), QUERY, st.data())
        def request_any(route, query, data):
            path = path_for(route, lambda name: data.draw(st.just(known.get(name, "1")) | HOSTILE_TEXT))
            assert get(client, path, query) is None

        request_any()


@pytest.mark.fuzzing
def test_no_query_string_or_path_value_is_a_server_error_on_the_private_listener(admin_user, incident):
    # As an operator, so that the admin and the tenants' pages run rather than redirect to the login.
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    sweep_and_fuzz(client, "gpufleet.urls", {"name": "node-001", "key": incident, "app_label": "fleet"})


@pytest.mark.fuzzing
def test_no_query_string_or_path_value_is_a_server_error_on_the_public_listener(incident):
    sweep_and_fuzz(Client(raise_request_exception=False), "gpufleet.urls_public", {"name": "node-001", "key": incident})
