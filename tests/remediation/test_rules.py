"""remediation.rules: alerts to actions, and the alerts of the Alertmanager webhook payload. Plain pytest, no Django."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation.rules import (
    ALERTS,
    LADDERS,
    MAX_ALERT_NAME,
    MAX_ALERTS,
    NODE_STEPS,
    XID_ALERTS,
    XIDS,
    Alert,
    Decision,
    Mode,
    PayloadError,
    RefusedAlert,
    RepeatOffender,
    Step,
    after_step,
    decide,
    parse_webhook,
    repeat_offense,
    xids_of,
)
from tests.support.examples import examples

# Captured from prometheus-alertmanager 0.25 posting to a webhook receiver with this project's config.
REAL_PAYLOAD = json.loads(
    r"""{"receiver": "gpu-fleet", "status": "firing", "alerts": [{"status": "firing", "labels": {"action":
    "quarantine", "alertname": "GPUFatalXid", "gpu": "3", "node": "node-001", "severity": "critical", "xid": "79"},
    "annotations": {"summary": "XID 79"}, "startsAt": "2026-11-29T17:08:42.969761594Z", "endsAt":
    "0001-01-01T00:00:00Z", "generatorURL": "http://127.0.0.1:9090/graph", "fingerprint": "472c046017b52349"}],
    "groupLabels": {"alertname": "GPUFatalXid", "gpu": "3", "node": "node-001"}, "commonLabels": {"action":
    "quarantine", "alertname": "GPUFatalXid", "gpu": "3", "node": "node-001", "severity": "critical", "xid": "79"},
    "commonAnnotations": {"summary": "XID 79"}, "externalURL": "http://vm:19093", "version": "4", "groupKey":
    "{}:{alertname=\"GPUFatalXid\", gpu=\"3\", node=\"node-001\"}", "truncatedAlerts": 0}"""
)


def alert(name: str = "GPUFatalXid", status: str = "firing", **labels: str) -> Alert:
    return Alert(
        name=name,
        status=status,
        labels={"alertname": name, **labels},
        annotations={},
        fingerprint="472c046017b52349",
        starts_at="2026-11-29T17:08:42.969761594Z",
    )


# The ladders.


def test_every_ladder_climbs_from_weaker_rungs_to_stronger_ones():
    order = list(Step)
    for name, ladder in LADDERS.items():
        assert [order.index(step) for step in ladder.steps] == sorted(order.index(step) for step in ladder.steps), name
        assert len(set(ladder.steps)) == len(ladder.steps), name


def test_every_ladder_that_acts_ends_in_quarantine():
    for name, ladder in LADDERS.items():
        assert not ladder.steps or ladder.steps[-1] is Step.QUARANTINE, name


def test_a_failed_last_repair_rung_quarantines_even_where_the_ladder_stops_short():
    from remediation.rules import Ladder

    assert Ladder((Step.GPU_RESET,)).after(Step.GPU_RESET) is Step.QUARANTINE
    assert LADDERS["gpu_lost"].after(Step.REBOOT) is Step.POWER_CYCLE
    assert LADDERS["gpu_lost"].after(Step.POWER_CYCLE) is Step.QUARANTINE


def test_only_ladders_that_warn_the_tenant_wait_for_a_drain():
    for name, ladder in LADDERS.items():
        if ladder.drain:
            assert ladder.notify_tenant and set(ladder.steps) & NODE_STEPS, name


# decide: XIDs.


@pytest.mark.parametrize(
    ("xid", "ladder", "first"),
    [
        (109, "gpu_hang", Step.GPU_RESET),
        (46, "gpu_hang", Step.GPU_RESET),
        (48, "gpu_memory", Step.GPU_RESET),
        (63, "gpu_memory", Step.GPU_RESET),
        (64, "gpu_memory", Step.GPU_RESET),
        (94, "gpu_memory", Step.GPU_RESET),
        (95, "gpu_memory", Step.GPU_RESET),
        (79, "gpu_lost", Step.REBOOT),
        (74, "gpu_lost", Step.REBOOT),
        (119, "gpu_lost", Step.REBOOT),
        (120, "gpu_lost", Step.REBOOT),
        (140, "hardware_failed", Step.QUARANTINE),
        (13, "application", None),
        (31, "application", None),
        (43, "none", None),
        (45, "none", None),
    ],
)
def test_each_xid_climbs_its_fault_classs_ladder(xid, ladder, first):
    decision = decide(alert(node="node-001", gpu="3", xid=str(xid)))
    assert (decision.rule, decision.step, decision.node, decision.gpu) == (ladder, first, "node-001", 3)
    assert decision.reason.startswith(f"XID {xid} on GPU 3: ")
    assert decision.mode is Mode.ENFORCE


def test_xid_79_reason_names_the_fault():
    decision = decide(alert(node="node-001", gpu="3", xid="79"))
    assert decision == Decision("gpu_lost", Step.REBOOT, "node-001", 3, "XID 79 on GPU 3: GPU has fallen off the bus")


def test_application_faults_tell_the_tenant_and_do_nothing_else():
    decision = decide(alert("GPUApplicationXid", node="node-001", gpu="1", xid="13"))
    assert decision.step is None and decision.ladder.notify_tenant


def test_every_xid_nvidia_resets_or_reboots_for_is_repaired_or_quarantined():
    for xid, rule in XIDS.items():
        if rule.nvidia_action in ("RESET_GPU", "RESTART_BM"):
            assert LADDERS[rule.ladder].steps, xid


def test_every_xid_alert_selects_xids_and_no_xid_is_selected_twice():
    selected = [xids_of(name) for name in XID_ALERTS]
    assert all(selected)
    assert sum(map(len, selected)) == len(frozenset().union(*selected))


def test_unknown_xid_calls_for_nothing_and_says_so():
    decision = decide(alert(node="node-001", gpu="0", xid="9999"))
    assert decision.step is None
    assert "not in the XID table" in decision.reason


@pytest.mark.parametrize("xid", [None, "", "79a", "-79", "123456"])
def test_xid_alert_without_a_valid_xid_calls_for_nothing(xid):
    labels = {"node": "node-001", "gpu": "0"} | ({} if xid is None else {"xid": xid})
    decision = decide(alert(**labels))
    assert decision.step is None
    assert "xid" in decision.reason


def test_reset_without_a_gpu_label_starts_at_the_first_whole_node_rung():
    decision = decide(alert("GPUResetRequiredXid", node="node-001", xid="46"))
    assert (decision.step, decision.gpu) == (Step.REBOOT, None)
    assert "no GPU to reset" in decision.reason


def test_gpu_label_that_is_not_an_index_is_ignored():
    assert decide(alert(node="node-001", gpu="GPU-1234", xid="79")).gpu is None


def test_a_ladder_named_in_shadow_is_decided_in_shadow_mode():
    decision = decide(alert(node="node-001", gpu="3", xid="79"), shadow=frozenset({"gpu_lost"}))
    assert (decision.rule, decision.step, decision.mode) == ("gpu_lost", Step.REBOOT, Mode.SHADOW)
    assert decide(alert(node="node-001", gpu="3", xid="109"), shadow=frozenset({"gpu_lost"})).mode is Mode.ENFORCE


# decide: the other alerts.


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("NodeAgentDown", Step.QUARANTINE),
        ("GPUUncorrectableECC", Step.GPU_RESET),
        ("GPURowRemapFailure", Step.QUARANTINE),
        ("GPUUnhealthy", Step.GPU_RESET),
        ("GPUOverTemperature", None),
    ],
)
def test_non_xid_alert_rules(name, step):
    assert decide(alert(name, node="node-004", gpu="2")).step is step


def test_node_agent_down_quarantines_without_a_gpu():
    decision = decide(alert("NodeAgentDown", node="node-004"))
    assert decision == Decision(
        "hardware_failed", Step.QUARANTINE, "node-004", None, f"NodeAgentDown: {ALERTS['NodeAgentDown'].reason}"
    )


def test_unknown_alert_calls_for_nothing():
    decision = decide(alert("DiskFull", node="node-001"))
    assert decision.step is None
    assert "no rule for alert DiskFull" in decision.reason


# decide: what never acts.


@pytest.mark.parametrize("name", ["GPUFatalXid", "NodeAgentDown", "GPUUnhealthy", "GPUResetRequiredXid"])
def test_resolved_alert_never_acts(name):
    decision = decide(alert(name, status="resolved", node="node-001", gpu="3", xid="79"))
    assert decision.step is None
    assert decision.node == "node-001"
    assert "resolved" in decision.reason


@pytest.mark.parametrize("node", [None, ""])
def test_alert_without_a_node_calls_for_nothing(node):
    labels = {"gpu": "3", "xid": "79"} | ({} if node is None else {"node": node})
    decision = decide(alert(**labels))
    assert (decision.step, decision.node) == (None, None)
    assert "no node label" in decision.reason


# after_step: a repair rung's outcome.


def test_gpu_healthy_after_a_rung_needs_nothing_more():
    reset = decide(alert("GPUResetRequiredXid", node="node-001", gpu="5", xid="109"))
    decision = after_step(reset, healthy=True)
    assert (decision.step, decision.node, decision.gpu) == (None, "node-001", 5)
    assert decision.reason.endswith("healthy after a GPU reset")


def test_gpu_still_unhealthy_climbs_the_next_rung_up_to_quarantine():
    decision = decide(alert(node="node-001", gpu="5", xid="79"))
    climbed = []
    while decision.step is not Step.QUARANTINE:
        decision = after_step(decision, healthy=False, why="no luck")
        climbed.append(decision.step)
    assert climbed == [Step.POWER_CYCLE, Step.QUARANTINE]
    assert decision.reason.endswith(
        "still unhealthy after a reboot: no luck; still unhealthy after a power cycle: no luck"
    )


def test_after_step_refuses_a_decision_that_is_not_a_repair():
    with pytest.raises(ValueError, match="repair rung"):
        after_step(decide(alert("GPURowRemapFailure", node="node-001", gpu="3")), healthy=True)


def test_the_third_remediation_within_the_window_quarantines_as_a_repeat_offender():
    reset = decide(alert("GPUResetRequiredXid", node="node-001", gpu="5", xid="109"))
    assert repeat_offense(reset, earlier=1) == reset
    third = repeat_offense(reset, earlier=2)
    assert (third.step, third.gpu) == (Step.QUARANTINE, 5)
    assert third.reason.startswith("repeat_offender: remediation 3 in 7 days, suggested RMA of GPU 5; XID 109")
    nothing = decide(alert("GPUApplicationXid", node="node-001", gpu="5", xid="13"))
    assert repeat_offense(nothing, earlier=9) == nothing  # an application's fault is no offence
    assert repeat_offense(reset, earlier=0, rule=RepeatOffender(count=1, window=timedelta(hours=1))).step is (
        Step.QUARANTINE
    )


# parse_webhook: what Alertmanager sends.


def test_real_alertmanager_payload_parses():
    [parsed] = parse_webhook(REAL_PAYLOAD)
    assert isinstance(parsed, Alert)
    assert parsed.name == "GPUFatalXid"
    assert parsed.status == "firing"
    assert parsed.labels["node"] == "node-001"
    assert parsed.annotations == {"summary": "XID 79"}
    assert parsed.fingerprint == "472c046017b52349"
    assert parsed.starts_at == "2026-11-29T17:08:42.969761594Z"
    assert decide(parsed).step is Step.REBOOT


def test_parsed_labels_cannot_be_changed():
    [parsed] = parse_webhook(REAL_PAYLOAD)
    assert isinstance(parsed, Alert)
    with pytest.raises(TypeError):
        parsed.labels["node"] = "node-002"  # type: ignore[index]  # the write the read-only mapping refuses


def test_payload_without_optional_fields_parses():
    payload = copy.deepcopy(REAL_PAYLOAD)
    for key in ("groupLabels", "commonLabels", "commonAnnotations", "externalURL", "truncatedAlerts"):
        del payload[key]
    del payload["alerts"][0]["generatorURL"]
    assert len(parse_webhook(payload)) == 1


def test_fields_alertmanager_may_add_are_ignored():
    payload = copy.deepcopy(REAL_PAYLOAD)
    payload["somethingNew"] = {"x": [1]}
    payload["alerts"][0]["silencedBy"] = []
    assert len(parse_webhook(payload)) == 1


def test_empty_alert_list_parses():
    assert parse_webhook({**REAL_PAYLOAD, "alerts": []}) == []


def test_max_alerts_parse():
    payload = {**REAL_PAYLOAD, "alerts": REAL_PAYLOAD["alerts"] * MAX_ALERTS}
    assert len(parse_webhook(payload)) == MAX_ALERTS


def set_path(payload: dict, path: tuple, value: object) -> dict:
    """A copy of the payload with the value at path replaced; a value of DELETE removes the key."""
    changed = copy.deepcopy(payload)
    target = changed
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed


DELETE = object()

# The envelope around the alerts is the view's to check: test_webhook.MALFORMED_ENVELOPES.
MALFORMED_PAYLOADS = [
    # (path, value, the field the message must name)
    (("alerts",), DELETE, "alerts"),
    (("alerts",), {"0": {}}, "alerts"),
]

MALFORMED_ALERTS = [
    # (path, value, the field the refusal must name)
    (("alerts", 0), "alert", "alerts[0]"),
    (("alerts", 0, "status"), "pending", "alerts[0].status"),
    (("alerts", 0, "status"), DELETE, "alerts[0].status"),
    (("alerts", 0, "labels"), DELETE, "alerts[0].labels"),
    (("alerts", 0, "labels"), [["node", "node-001"]], "alerts[0].labels"),
    (("alerts", 0, "labels", "alertname"), DELETE, "alerts[0].labels.alertname"),
    (("alerts", 0, "labels", "alertname"), "", "alerts[0].labels.alertname"),
    (("alerts", 0, "labels", "alertname"), "A" * (MAX_ALERT_NAME + 1), "alerts[0].labels.alertname"),
    (("alerts", 0, "labels", "node"), 1, "alerts[0].labels.node"),
    (("alerts", 0, "labels", "node"), "n" * 1025, "alerts[0].labels.node"),
    (("alerts", 0, "labels", "node"), "node-\x00001", "alerts[0].labels.node"),
    (("alerts", 0, "labels", "0node"), "x", "alerts[0].labels"),
    (("alerts", 0, "labels", "no-de"), "x", "alerts[0].labels"),
    (("alerts", 0, "labels", "no\x00de"), "x", "alerts[0].labels"),
    (("alerts", 0, "annotations"), None, "alerts[0].annotations"),
    (("alerts", 0, "annotations", "summary"), "s" * 4097, "alerts[0].annotations.summary"),
    (("alerts", 0, "annotations", "summary"), "XID\x00", "alerts[0].annotations.summary"),
    (("alerts", 0, "startsAt"), DELETE, "alerts[0].startsAt"),
    (("alerts", 0, "startsAt"), "yesterday", "alerts[0].startsAt"),
    (("alerts", 0, "startsAt"), "2026-02-31T00:00:00Z", "alerts[0].startsAt"),
    (("alerts", 0, "startsAt"), "2026-11-29T17:08:42", "alerts[0].startsAt"),
    (("alerts", 0, "startsAt"), 1764436122, "alerts[0].startsAt"),
    (("alerts", 0, "endsAt"), DELETE, "alerts[0].endsAt"),
    (("alerts", 0, "endsAt"), "2026-11-29T25:00:00Z", "alerts[0].endsAt"),
    (("alerts", 0, "generatorURL"), 5, "alerts[0].generatorURL"),
    (("alerts", 0, "generatorURL"), "http://\x00", "alerts[0].generatorURL"),
    (("alerts", 0, "fingerprint"), DELETE, "alerts[0].fingerprint"),
    (("alerts", 0, "fingerprint"), "472C046017B52349", "alerts[0].fingerprint"),
    (("alerts", 0, "fingerprint"), "472c046017b5234", "alerts[0].fingerprint"),
    (("alerts", 0, "fingerprint"), 0x472C046017B52349, "alerts[0].fingerprint"),
]


@pytest.mark.parametrize(
    ("path", "value", "field"), MALFORMED_PAYLOADS, ids=[f"{f}={v!r:.20}" for _, v, f in MALFORMED_PAYLOADS]
)
def test_a_malformed_payload_is_refused_naming_the_field(path, value, field):
    with pytest.raises(PayloadError) as raised:
        parse_webhook(set_path(REAL_PAYLOAD, path, value))
    assert str(raised.value).split(":")[0] == field


@pytest.mark.parametrize(
    ("path", "value", "field"), MALFORMED_ALERTS, ids=[f"{f}={v!r:.20}" for _, v, f in MALFORMED_ALERTS]
)
def test_a_malformed_alert_is_refused_alone_naming_the_field(path, value, field):
    payload = set_path(REAL_PAYLOAD, path, value)
    payload["alerts"].append(REAL_PAYLOAD["alerts"][0])
    refused, accepted = parse_webhook(payload)
    assert isinstance(refused, RefusedAlert) and refused.index == 0
    assert refused.reason.split(":")[0] == field
    fingerprint_intact = path[-1] != "fingerprint" and path != ("alerts", 0)
    assert refused.fingerprint == ("472c046017b52349" if fingerprint_intact else None)
    assert isinstance(accepted, Alert) and accepted.labels["node"] == "node-001"


def test_a_nul_in_an_alert_is_refused_wherever_it_is_and_says_so():
    payload = set_path(REAL_PAYLOAD, ("alerts", 0, "silencedBy"), ["a\x00b"])
    [refused] = parse_webhook(payload)
    assert isinstance(refused, RefusedAlert)
    assert refused.reason == "alerts[0].silencedBy[0]: must not contain the NUL character (U+0000)"


@pytest.mark.parametrize("payload", [None, [], "payload", 4, b"{}"])
def test_payload_that_is_not_an_object_is_refused(payload):
    with pytest.raises(PayloadError, match=r"^payload: "):
        parse_webhook(payload)


def test_too_many_alerts_are_refused():
    with pytest.raises(PayloadError, match=r"^alerts: at most 1000"):
        parse_webhook({**REAL_PAYLOAD, "alerts": REAL_PAYLOAD["alerts"] * (MAX_ALERTS + 1)})


def test_an_alert_with_too_many_labels_is_refused():
    labels = {f"l{i}": "x" for i in range(64)} | {"alertname": "GPUFatalXid"}
    [refused] = parse_webhook(set_path(REAL_PAYLOAD, ("alerts", 0, "labels"), labels))
    assert isinstance(refused, RefusedAlert)
    assert refused.reason.startswith("alerts[0].labels: at most 64")


def test_an_error_in_a_later_alert_names_its_index():
    payload = {**REAL_PAYLOAD, "alerts": [*REAL_PAYLOAD["alerts"], {**REAL_PAYLOAD["alerts"][0], "fingerprint": "x"}]}
    accepted, refused = parse_webhook(payload)
    assert isinstance(accepted, Alert) and isinstance(refused, RefusedAlert)
    assert refused.index == 1 and refused.reason.startswith("alerts[1].fingerprint: ")


# parse_webhook: fuzzing. Whatever arrives, it parses (each alert accepted or refused) or raises
# PayloadError, nothing else.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def check_parse(payload: object) -> None:
    try:
        alerts = parse_webhook(payload)
    except PayloadError:
        return
    for parsed in alerts:
        if isinstance(parsed, Alert):
            decide(parsed)  # a parsed alert is always decidable
        else:
            assert isinstance(parsed, RefusedAlert) and parsed.reason


@settings(max_examples=examples(300), deadline=None)
@given(json_values)
def test_any_json_value_parses_or_raises_payload_error(payload):
    check_parse(payload)


ALERT_PATHS = [
    ("version",),
    ("status",),
    ("receiver",),
    ("groupKey",),
    ("truncatedAlerts",),
    ("commonLabels",),
    ("alerts",),
    ("alerts", 0),
    ("alerts", 0, "status"),
    ("alerts", 0, "labels"),
    ("alerts", 0, "labels", "alertname"),
    ("alerts", 0, "labels", "node"),
    ("alerts", 0, "labels", "gpu"),
    ("alerts", 0, "labels", "xid"),
    ("alerts", 0, "annotations"),
    ("alerts", 0, "startsAt"),
    ("alerts", 0, "endsAt"),
    ("alerts", 0, "fingerprint"),
]


@settings(max_examples=examples(500), deadline=None)
@given(st.sampled_from(ALERT_PATHS), json_values | st.just(DELETE))
def test_a_real_payload_with_any_field_changed_parses_or_raises_payload_error(path, value):
    check_parse(set_path(REAL_PAYLOAD, path, value))


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=6))
def test_any_labels_parse_or_raise_payload_error(labels):
    check_parse(set_path(REAL_PAYLOAD, ("alerts", 0, "labels"), labels))
