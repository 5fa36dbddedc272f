"""POST /v1/agents/{node}/xids: the node's agent reports an XID as it sees it, with its own token;
a report is acted on once per occurrence, and the agent's report and Alertmanager's alert for
the same occurrence never act twice, whichever arrives first."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import Node
from remediation import rules, services
from remediation.models import Remediation
from tests.support.agent_credentials import report_token
from tests.support.factories import alert, payload

pytestmark = pytest.mark.django_db(transaction=True)


def rfc3339(at) -> str:
    return at.isoformat().replace("+00:00", "Z")


def report(node: Node, *, gpu=3, xid=79, occurrence=1, seen_at=None, token=None):
    body = {"gpu": gpu, "xid": xid, "occurrence": occurrence, "seen_at": seen_at or rfc3339(timezone.now())}
    authorization = f"Bearer {report_token(node) if token is None else token}"
    return APIClient().post(f"/v1/agents/{node.name}/xids", body, format="json", HTTP_AUTHORIZATION=authorization)


def alertmanager(node: Node, *, xid=79, gpu=3, starts_at, n=0) -> Remediation:
    firing = alert(node.name, xid=xid, gpu=gpu, n=n)
    firing["startsAt"] = rfc3339(starts_at)
    [parsed] = rules.parse_webhook(payload(firing))
    assert isinstance(parsed, rules.Alert)
    (received,) = services.receive_alerts([parsed])
    return received


def test_only_the_nodes_own_live_report_token_is_accepted(available_fleet):
    node, other = available_fleet[:2]
    assert report_token(node) != report_token(other)
    assert APIClient().post(f"/v1/agents/{node.name}/xids", {}, format="json").status_code == 401
    for answer in (
        report(node, token="wrong"),
        report(node, token=report_token(other)),  # another node's agent speaks for its own node only
        APIClient().post(
            "/v1/agents/no-such-node/xids", {}, format="json", HTTP_AUTHORIZATION=f"Bearer {report_token(node)}"
        ),
    ):
        assert answer.status_code == 401
        assert answer.json() == {"detail": "a valid bearer token is required"}
        assert answer["WWW-Authenticate"] == 'Bearer realm="node-agent"'
    assert not Remediation.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"gpu": "3", "xid": 79, "occurrence": 1, "seen_at": "2026-12-01T10:00:00Z"},
        {"gpu": 3, "xid": 0, "occurrence": 1, "seen_at": "2026-12-01T10:00:00Z"},
        {"gpu": 3, "xid": 79, "occurrence": 0, "seen_at": "2026-12-01T10:00:00Z"},
        {"gpu": 3, "xid": 79, "occurrence": 1, "seen_at": "yesterday"},
        {"gpu": 3, "xid": 79, "occurrence": 1},
        [],
    ],
)
def test_a_malformed_report_is_a_400_that_says_why(available_fleet, body):
    node = available_fleet[0]
    answer = APIClient().post(
        f"/v1/agents/{node.name}/xids", body, format="json", HTTP_AUTHORIZATION=f"Bearer {report_token(node)}"
    )
    assert answer.status_code == 400
    assert answer.json()["detail"]
    assert not Remediation.objects.exists()


def test_a_report_is_acted_on_once_per_occurrence(available_fleet):
    node = available_fleet[0]
    seen_at = rfc3339(timezone.now())
    first = report(node, seen_at=seen_at)
    assert first.status_code == 202
    assert first.json() | {"remediation": 0} == {"remediation": 0, "status": "pending", "step": "reboot"}
    again = report(node, seen_at=seen_at)  # the agent retries: it never heard the answer
    assert (again.status_code, again.json()) == (200, first.json())
    remediation = Remediation.objects.get()
    assert (remediation.alert, remediation.labels["source"], remediation.action) == (
        "AgentXidReport",
        "agent",
        "gpu_lost",
    )


def test_alertmanagers_alert_for_an_occurrence_the_agent_reported_is_not_acted_on_again(available_fleet):
    node = available_fleet[0]
    seen = timezone.now() - timedelta(seconds=20)
    assert report(node, seen_at=rfc3339(seen)).status_code == 202
    reported = Remediation.objects.get()
    assert services.step_finished(remediation_id=reported.pk, healthy=True).status == "repaired"  # a quick reboot

    late = alertmanager(node, starts_at=seen + timedelta(seconds=15))  # a 15 s scrape later
    assert (late.status, late.step) == ("no_action", "")
    assert late.reason.endswith(f"already acted on by remediation {reported.pk} (AgentXidReport)")
    assert Remediation.objects.filter(status="pending").count() == 0


def test_a_late_report_of_what_alertmanager_acted_on_is_not_acted_on_again(available_fleet):
    node = available_fleet[0]
    seen = timezone.now() - timedelta(seconds=60)
    first = alertmanager(node, starts_at=seen + timedelta(seconds=2))
    assert first.status == "pending"
    services.step_finished(remediation_id=first.pk, healthy=True)
    late = report(node, seen_at=rfc3339(seen))  # the control plane was unreachable: the agent retried
    assert late.status_code == 202 and late.json()["status"] == "no_action"
    assert Remediation.objects.get(pk=late.json()["remediation"]).reason.endswith(
        f"already acted on by remediation {first.pk} (GPUFatalXid)"
    )


def test_a_recurrence_the_counter_rules_cannot_see_is_acted_on(available_fleet):
    """The agent restarted (its counters too), and the same XID came back within the alert rules'
    5-minute window: Prometheus' increase() sees no rise and Alertmanager sends nothing new, but
    the agent reports it, with the same occurrence number and a later time."""
    node = available_fleet[0]
    first_seen = timezone.now() - timedelta(minutes=2)
    assert report(node, xid=109, seen_at=rfc3339(first_seen)).status_code == 202
    services.step_finished(remediation_id=Remediation.objects.get().pk, healthy=True)
    again = report(node, xid=109, seen_at=rfc3339(first_seen + timedelta(seconds=90)))
    assert again.status_code == 202
    assert (again.json()["status"], again.json()["step"]) == ("pending", "gpu_reset")


def test_a_report_for_another_gpu_or_xid_is_another_fault(available_fleet):
    node = available_fleet[0]
    seen = timezone.now()
    assert report(node, gpu=1, xid=140, seen_at=rfc3339(seen)).json()["status"] == "applied"
    other = alertmanager(node, xid=140, gpu=2, starts_at=seen + timedelta(seconds=3))
    assert other.reason.endswith("is already quarantined")  # not "already acted on": GPU 2 is another fault
