"""POST /v1/alerts/alertmanager: authenticated, validated, idempotent, capped, and never returning a node."""

import json
import threading

import hypothesis
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from fleet.models import AuditEvent, Node
from remediation.models import Remediation
from reservations.models import Reservation
from tests.remediation.test_rules import DELETE, REAL_PAYLOAD, set_path
from tests.support.api import tenant_client
from tests.support.examples import examples
from tests.support.factories import alert, drive, enrol_default_fleet, make_available, payload
from tests.support.hostile import HOSTILE_TEXT

TOKEN = "test-webhook-token"
URL = "/v1/alerts/alertmanager"


def send(body, token=TOKEN, client=None):
    client = client or APIClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.post(URL, raw, content_type="application/json", **headers)


@pytest.fixture(autouse=True)
def webhook_token(settings):
    settings.GPUFLEET_WEBHOOK_TOKEN = TOKEN


def test_no_token_or_a_wrong_one_is_401(available_fleet):
    node = available_fleet[0]
    assert send(payload(alert(node.name)), token=None).status_code == 401
    assert send(payload(alert(node.name)), token="wrong").status_code == 401
    assert Node.objects.get(pk=node.pk).state == "available"


@pytest.mark.parametrize(
    "body",
    ["{broken", json.dumps([1, 2]), json.dumps({"version": "4"}), json.dumps({**payload(), "alerts": "many"})],
)
def test_malformed_is_400(available_fleet, body):
    answer = send(body)
    assert answer.status_code == 400 and "detail" in answer.json()


MALFORMED_ENVELOPES = [
    # (path, value, the field the message must name)
    (("version",), "3", "version"),
    (("version",), 4, "version"),
    (("version",), DELETE, "version"),
    (("status",), "pending", "status"),
    (("status",), DELETE, "status"),
    (("receiver",), None, "receiver"),
    (("receiver",), DELETE, "receiver"),
    (("groupKey",), 7, "groupKey"),
    (("groupKey",), DELETE, "groupKey"),
    (("externalURL",), ["http://x"], "externalURL"),
    (("truncatedAlerts",), -1, "truncatedAlerts"),
    (("truncatedAlerts",), True, "truncatedAlerts"),
    (("groupLabels",), [], "groupLabels"),
    (("commonLabels",), {"node": 1}, "commonLabels.node"),
    (("commonAnnotations",), "x", "commonAnnotations"),
]


@pytest.mark.parametrize(
    ("path", "value", "field"), MALFORMED_ENVELOPES, ids=[f"{f}={v!r:.20}" for _, v, f in MALFORMED_ENVELOPES]
)
def test_a_malformed_envelope_is_a_400_naming_the_field(db, path, value, field):
    answer = send(set_path(REAL_PAYLOAD, path, value))
    assert answer.status_code == 400
    assert answer.json()["detail"].split(":")[0] == field


def test_the_payload_alertmanager_sends_is_accepted(available_fleet):
    assert send(REAL_PAYLOAD).status_code == 200


def test_a_nul_in_the_group_and_common_labels_alone_refuses_nothing(available_fleet):
    """They repeat the alerts' own labels and nothing keeps them: each alert answers for itself."""
    body = set_path(REAL_PAYLOAD, ("groupLabels", "node"), "node-\x00")
    body["commonAnnotations"]["summary"] = "\x00"
    answer = send(body)
    assert answer.status_code == 200 and answer.json()["refused"] == []


def test_oversized_is_413(available_fleet):
    huge = payload(*[alert(f"node-{i:03d}", n=i % 60) for i in range(50)])
    huge["commonAnnotations"] = {"padding": "x" * (1024 * 1024)}
    assert send(huge).status_code == 413


def test_a_fatal_xid_quarantines_the_node_with_the_reason(available_fleet):
    node = available_fleet[0]
    answer = send(payload(alert(node.name)))
    assert answer.status_code == 200, answer.content
    node.refresh_from_db()
    assert node.state == "quarantined" and node.quarantine_reason.startswith("hardware_fault: ")
    assert "XID 140" in node.quarantine_reason
    remediation = Remediation.objects.get()
    assert (remediation.status, remediation.action, remediation.node) == ("applied", "hardware_failed", node)
    assert [e.step for e in remediation.timeline.all()] == ["alert_firing", "webhook_received", "quarantined"]
    listing = tenant_client("acme").get("/v1/remediations").json()["results"]  # any signed-in viewer
    assert listing[0]["node"] == node.name and listing[0]["status"] == "applied"
    assert set(listing[0]) >= {"node", "action", "reason", "status", "alert", "at"}


def test_the_same_alert_twice_acts_once(available_fleet):
    node = available_fleet[0]
    send(payload(alert(node.name)))
    again = send(payload(alert(node.name)))
    assert again.status_code == 200
    assert Remediation.objects.count() == 1
    assert AuditEvent.objects.filter(node=node, event="hardware_fault").count() == 1


def test_a_resolved_alert_never_returns_a_node(available_fleet):
    node = available_fleet[0]
    send(payload(alert(node.name)))
    send(payload(alert(node.name, status="resolved"), status="resolved"))
    assert Node.objects.get(pk=node.pk).state == "quarantined"


def test_an_application_xid_changes_nothing(available_fleet):
    node = available_fleet[0]
    send(payload(alert(node.name, xid=13, name="GPUApplicationXid")))
    assert Node.objects.get(pk=node.pk).state == "available"
    assert Remediation.objects.get().status == "no_action"


@override_settings(REMEDIATION_CAP=5, REMEDIATION_POD_CAP=3)
def test_the_cap_suppresses_and_an_operator_can_apply(admin_client, available_fleet):
    # p1 holds 8 of the 12 nodes: the pod cap of 3 stops the fourth
    p1 = [n for n in available_fleet if n.rack.pod.name == "p1"]
    for n, node in enumerate(p1[:5]):
        send(payload(alert(node.name, n=n)))
    statuses = list(Remediation.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["applied"] * 3 + ["suppressed"] * 2
    suppressed = Remediation.objects.filter(status="suppressed").first()
    assert suppressed is not None
    assert "pod cap 3" in suppressed.reason
    admin_client.post(
        "/admin/remediation/remediation/", {"action": "apply_suppressed", "_selected_action": [suppressed.pk]}
    )
    suppressed.refresh_from_db()
    assert suppressed.status == "applied" and suppressed.decided_by == "operator:admin"
    assert suppressed.node_id is not None
    assert Node.objects.get(pk=suppressed.node_id).state == "quarantined"


def test_a_quarantine_under_a_reservation_degrades_it(available_fleet, alices_reservation):
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="active")
    node = drive(available_fleet[0], "provision_requested", "provision_succeeded", reservation=alices_reservation)
    send(payload(alert(node.name)))
    alices_reservation.refresh_from_db()
    assert alices_reservation.state == "degraded"
    assert Remediation.objects.get().reservation == alices_reservation


def test_a_gpu_that_stays_unhealthy_climbs_the_ladder_to_quarantine(available_fleet):
    from remediation import services

    node = available_fleet[0]
    send(payload(alert(node.name, xid=109, name="GPUResetRequiredXid")))
    remediation = Remediation.objects.get()
    assert (remediation.status, remediation.action, remediation.step) == ("pending", "gpu_hang", "gpu_reset")
    assert services.step_finished(remediation_id=remediation.pk, healthy=False).step == "reboot"
    assert services.step_finished(remediation_id=remediation.pk, healthy=False).status == "applied"
    assert Node.objects.get(pk=node.pk).state == "quarantined"
    steps = list(remediation.timeline.values_list("step", "detail"))
    assert ("escalated", "reboot") in steps and ("escalated", "quarantine") in steps


def test_a_gpu_healthy_after_a_reset_stays_in_service(available_fleet):
    from remediation import services

    node = available_fleet[0]
    send(payload(alert(node.name, xid=109, name="GPUResetRequiredXid")))
    remediation = Remediation.objects.get()
    assert services.step_finished(remediation_id=remediation.pk, healthy=True).status == "repaired"
    assert Node.objects.get(pk=node.pk).state == "available"


def test_a_later_alert_on_a_quarantined_node_does_nothing_more(available_fleet):
    node = available_fleet[0]
    send(payload(alert(node.name)))
    send(payload(alert(node.name, name="GPUUnhealthy", n=30)))
    later = Remediation.objects.order_by("id").last()
    assert later is not None
    assert later.status == "no_action" and "already quarantined" in later.reason


def test_prometheus_targets_list_the_agents_that_should_answer(available_fleet):
    drive(available_fleet[1], "hardware_fault", reason="XID 79")
    prometheus = {"Authorization": f"Bearer {settings.GPUFLEET_PROMETHEUS_TOKEN}"}
    targets = APIClient().get("/v1/prometheus/targets", headers=prometheus).json()
    assert len(targets) == 11 and "node-002" not in json.dumps(targets)
    assert targets[0] == {
        "targets": ["127.0.0.1:8100"],
        "labels": {
            "node": "node-001",
            "pod": "p1",
            "rack": "r01",
            "__metrics_path__": "/agent/node-001/metrics",
            "__scheme__": "http",
        },
    }


@pytest.mark.django_db(transaction=True)
def test_the_cap_holds_for_concurrent_alerts():
    nodes = make_available(enrol_default_fleet(20))  # p1: r01, r02 (16 nodes); p2: r03 (4 nodes)
    barrier = threading.Barrier(len(nodes))

    def deliver(n, node):
        barrier.wait()
        try:
            with override_settings(GPUFLEET_WEBHOOK_TOKEN=TOKEN):
                send(payload(alert(node.name, n=n)))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver, args=(n, node)) for n, node in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Remediation.objects.filter(status="applied").count() == 5
    assert Remediation.objects.filter(status="suppressed").count() == 15
    assert Node.objects.filter(state="quarantined").count() == 5


def test_an_alert_with_a_nul_is_refused_and_the_rest_of_its_batch_is_acted_on(available_fleet):
    good, bad = available_fleet[0], available_fleet[1]
    poisoned = alert(bad.name, n=1)
    poisoned["labels"]["node"] = f"{bad.name}\x00"
    answer = send(payload(alert(good.name), poisoned))
    # A 2xx: Alertmanager would send the whole group again, good alert included, on any other answer.
    assert answer.status_code == 207, answer.content
    body = answer.json()
    assert body["received"] == 2 and [r["status"] for r in body["remediations"]] == ["applied"]
    assert body["refused"] == [
        {
            "index": 1,
            "fingerprint": poisoned["fingerprint"],
            "detail": "alerts[1].labels.node: must not contain the NUL character (U+0000)",
        }
    ]
    assert Node.objects.get(pk=good.pk).state == "quarantined"
    assert Node.objects.get(pk=bad.pk).state == "available"
    assert Remediation.objects.count() == 1


def test_an_alert_name_longer_than_its_record_keeps_is_refused_alone(available_fleet):
    named = alert(available_fleet[1].name, n=1)
    named["labels"]["alertname"] = "GPUFatalXid" + "x" * 200
    answer = send(payload(alert(available_fleet[0].name), named))
    assert answer.status_code == 207, answer.content
    assert answer.json()["refused"][0]["detail"] == "alerts[1].labels.alertname: at most 128 characters"
    assert Remediation.objects.count() == 1


def test_a_batch_with_nothing_refused_answers_200_and_an_empty_refusal_list(available_fleet):
    answer = send(payload(alert(available_fleet[0].name)))
    assert answer.status_code == 200 and answer.json()["refused"] == []


# Any label values, through the real view: each alert is acted on or refused, never a 5xx.
@hypothesis.settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(
    labels=st.dictionaries(st.sampled_from(["alertname", "node", "gpu", "xid", "severity"]), HOSTILE_TEXT),
    annotation=HOSTILE_TEXT,
    n=st.integers(0, 59),
)
def test_any_label_values_are_acted_on_or_refused_alert_by_alert(available_fleet, labels, annotation, n):
    generated = alert(available_fleet[n % len(available_fleet)].name, n=n)
    generated["labels"] |= labels
    generated["annotations"]["summary"] = annotation
    answer = send(payload(generated, alert("node-001", n=n)), client=APIClient(raise_request_exception=False))
    assert answer.status_code in (200, 207), answer.content
    body = answer.json()
    assert len(body["remediations"]) + len(body["refused"]) == body["received"] == 2
