"""Alertmanager alerts -> remediation actions: the XID table, the other alerts' rules, the webhook payload.

Pure: the standard library and core/ only, so it can be read and tested without Django.

How alerts reach us. Prometheus scrapes every node agent through HTTP service discovery served by
the control plane at GET /v1/prometheus/targets (deploy/prometheus/prometheus.yml, job
`node-agents`). The answer is standard Prometheus http_sd JSON, one group per node, so every
series, and so every alert, carries the node's name in the `node` label:

    [
      {
        "targets": ["127.0.0.1:8100"],
        "labels": {
          "node": "node-001",
          "pod": "p1",
          "rack": "r01",
          "__metrics_path__": "/agent/node-001/metrics",
          "__scheme__": "http"
        }
      }
    ]

- `targets`: exactly one "host:port" of the node's agent (bmcsim serves every agent on one port,
  hence the per-node `__metrics_path__`; the path of the inventory's `agent_url` plus "/metrics").
- `labels`: `node`, `pod`, `rack` as strings, `__metrics_path__`, and `__scheme__` (the agent URL's
  scheme). Nothing else is required.
- Content-Type: application/json; status 200 with `[]` when there are no nodes.
- Which nodes: those whose agent is expected to answer (`available` and `active`); a node being
  rebooted by a workflow or out of service would otherwise raise NodeAgentDown.

Alertmanager (deploy/alertmanager/alertmanager.yml) posts the v4 webhook payload to
POST /v1/alerts/alertmanager; the view checks its envelope, `parse_alerts` each alert, and
`decide` maps each alert to an action. The alert rules are in deploy/prometheus/rules/gpu.yml;
tests check that their XID lists and this table agree.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

from core import validation as v
from core.parsing import InvalidInput, check_text


class Action(enum.StrEnum):
    QUARANTINE = "quarantine"
    # Resets the GPU through the node's agent; quarantines if it is not healthy after (`after_reset`).
    RESET_GPU = "reset_gpu"
    NONE = "none"


@dataclass(frozen=True)
class RepeatOffender:
    """A node remediated `count` times within `window` is quarantined for an operator (and likely an
    RMA), whatever its fault's rule says: a GPU that needs a reset every other day is failing."""

    count: int
    window: timedelta


REPEAT_OFFENDER = RepeatOffender(count=3, window=timedelta(days=7))


@dataclass(frozen=True)
class Alert:
    name: str
    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    fingerprint: str
    starts_at: str  # RFC 3339, exactly as Alertmanager sent it: with the fingerprint, the idempotency key


@dataclass(frozen=True)
class Decision:
    action: Action
    node: str | None
    gpu: int | None
    reason: str  # e.g. "XID 79 on GPU 3: GPU has fallen off the bus"


@dataclass(frozen=True)
class XidRule:
    nvidia_action: str  # NVIDIA's "Resolution Bucket (Immediate Action)"
    action: Action
    what: str


# Source: NVIDIA, "Xid Errors", Xid catalog for Ampere and newer GPUs, column "Resolution Bucket
# (Immediate Action)": https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
# Our action departs from NVIDIA's where a multi-tenant cloud must be stricter: a fault of the
# GPU's memory, bus, NVLink or firmware (PMU, GSP) takes the node out of service until an operator
# has looked, because the next tenant must not land on it, even where NVIDIA's immediate action
# (RESET_GPU, RESTART_APP, IGNORE) would let the current job carry on. Hangs that a reset clears
# get RESET_GPU: the node's agent resets the GPU, and a GPU still unhealthy after it
# (`after_reset`) is quarantined. Application faults get no action.
XIDS: Mapping[int, XidRule] = MappingProxyType(
    {
        # Node-level hardware faults: quarantine.
        48: XidRule("WORKFLOW_XID_48", Action.QUARANTINE, "double-bit ECC error"),
        62: XidRule("RESET_GPU", Action.QUARANTINE, "internal micro-controller (PMU) halted"),
        64: XidRule("RESET_GPU", Action.QUARANTINE, "ECC page retirement or row remapping failed"),
        74: XidRule("WORKFLOW_NVLINK_ERR", Action.QUARANTINE, "NVLink error"),
        79: XidRule("RESTART_BM", Action.QUARANTINE, "GPU has fallen off the bus"),
        92: XidRule("IGNORE", Action.QUARANTINE, "excessive single-bit ECC errors: memory is degrading"),
        94: XidRule("RESTART_APP", Action.QUARANTINE, "contained uncorrectable ECC error"),
        95: XidRule("RESET_GPU", Action.QUARANTINE, "uncontained uncorrectable ECC error"),
        119: XidRule("RESET_GPU", Action.QUARANTINE, "GSP RPC timeout"),
        120: XidRule("RESET_GPU", Action.QUARANTINE, "GSP error"),
        140: XidRule("RESET_GPU", Action.QUARANTINE, "unrecoverable ECC error escaped containment"),
        144: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink SAW error"),
        145: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink RLW error"),
        146: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink TLW error"),
        147: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink TREX error"),
        148: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink NVLPW control error"),
        149: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink NETIR error"),
        150: XidRule("WORKFLOW_NVLINK5_ERR", Action.QUARANTINE, "NVLink MSE error"),
        # GPU hangs and recoverable events that NVIDIA resolves with a GPU reset.
        46: XidRule("RESET_GPU", Action.RESET_GPU, "GPU stopped processing (timeout)"),
        109: XidRule("RESET_GPU", Action.RESET_GPU, "context switch timeout"),
        110: XidRule("RESET_GPU", Action.RESET_GPU, "security fault"),
        136: XidRule("RESET_GPU", Action.RESET_GPU, "NVLink link training failed"),
        143: XidRule("RESET_GPU", Action.RESET_GPU, "GPU initialisation error"),
        155: XidRule("RESET_GPU", Action.RESET_GPU, "NVLink software-defined error"),
        156: XidRule("RESET_GPU", Action.RESET_GPU, "resource retirement pending a reset"),
        158: XidRule("RESET_GPU", Action.RESET_GPU, "GPU fatal timeout"),
        # Application-level: the tenant's job failed, the GPU is fine.
        8: XidRule("RESTART_APP", Action.NONE, "GPU stopped processing an application's work"),
        13: XidRule("RESTART_APP", Action.NONE, "graphics engine exception (application error)"),
        31: XidRule("RESTART_APP", Action.NONE, "GPU memory page fault (application error)"),
        32: XidRule("RESTART_APP", Action.NONE, "invalid or corrupted push buffer stream"),
        43: XidRule("IGNORE", Action.NONE, "GPU stopped processing an application's channel"),
        45: XidRule("WORKFLOW_XID_45", Action.NONE, "preemptive cleanup after an application stopped"),
        63: XidRule("IGNORE", Action.NONE, "ECC page retired or row remapped successfully"),
        69: XidRule("RESTART_APP", Action.NONE, "graphics engine class error (application error)"),
    }
)


@dataclass(frozen=True)
class AlertRule:
    action: Action
    reason: str


# The alerts of deploy/prometheus/rules/gpu.yml other than the two XID alerts.
ALERTS: Mapping[str, AlertRule] = MappingProxyType(
    {
        "NodeAgentDown": AlertRule(Action.QUARANTINE, "node agent unreachable: its GPUs' health cannot be observed"),
        "GPUUncorrectableECC": AlertRule(Action.QUARANTINE, "uncorrectable (double-bit) ECC errors"),
        "GPURowRemapFailure": AlertRule(Action.QUARANTINE, "row remapping failed: no spare memory rows left"),
        "GPUUnhealthy": AlertRule(Action.RESET_GPU, "the node agent reports the GPU unhealthy"),
        # The GPU throttles and shuts itself down to protect itself; the usual cause is cooling,
        # which taking one node out does not fix. Operators are told, nothing is done.
        "GPUOverTemperature": AlertRule(Action.NONE, "GPU over temperature"),
    }
)

# The two XID alerts, each selecting the XIDs of one action (`xids_with`). `decide` takes the action
# from the XID table, not from the alert's name, so the table stays the one source of truth.
XID_ALERTS: Mapping[str, Action] = MappingProxyType(
    {"GPUFatalXid": Action.QUARANTINE, "GPUResetRequiredXid": Action.RESET_GPU}
)


def xids_with(action: Action) -> frozenset[int]:
    """The XIDs whose rule is `action`: what the XID alerts of gpu.yml must select."""
    return frozenset(xid for xid, rule in XIDS.items() if rule.action is action)


def decide(alert: Alert) -> Decision:
    """The action an alert calls for. A resolved alert never returns a node: it calls for nothing."""
    node = alert.labels.get("node") or None
    gpu = _gpu_index(alert.labels.get("gpu"))
    on_gpu = f" on GPU {gpu}" if gpu is not None else ""
    if alert.status == "resolved":
        return Decision(Action.NONE, node, gpu, f"{alert.name} resolved: resolved alerts return nothing to service")
    if node is None:
        return Decision(Action.NONE, None, gpu, f"{alert.name} has no node label: nothing to act on")
    if alert.name in XID_ALERTS:
        xid = _xid(alert.labels.get("xid"))
        if xid is None:
            return Decision(Action.NONE, node, gpu, f"{alert.name} has no valid xid label")
        rule = XIDS.get(xid)
        if rule is None:
            return Decision(Action.NONE, node, gpu, f"XID {xid}{on_gpu}: not in the XID table, no automatic action")
        action, reason = rule.action, f"XID {xid}{on_gpu}: {rule.what}"
    elif alert.name in ALERTS:
        rule = ALERTS[alert.name]
        action, reason = rule.action, f"{alert.name}{on_gpu}: {rule.reason}"
    else:
        return Decision(Action.NONE, node, gpu, f"no rule for alert {alert.name}")
    if action is Action.RESET_GPU and gpu is None:
        # A reset needs a GPU to aim at; without one only the whole node can be taken out.
        return Decision(Action.QUARANTINE, node, None, f"{reason} (no gpu label, so no GPU to reset)")
    return Decision(action, node, gpu, reason)


def after_reset(decision: Decision, *, healthy: bool, why: str = "") -> Decision:
    """The outcome of a RESET_GPU decision: done if the GPU is healthy again, else escalate to
    quarantine; `why` says what went wrong with the reset, if something did."""
    if decision.action is not Action.RESET_GPU:
        raise ValueError(f"after_reset applies to {Action.RESET_GPU} decisions, not {decision.action}")
    if healthy:
        return Decision(Action.NONE, decision.node, decision.gpu, f"{decision.reason}; healthy after a GPU reset")
    after = f"; {why}" if why else ""
    return Decision(
        Action.QUARANTINE, decision.node, decision.gpu, f"{decision.reason}; still unhealthy after a GPU reset{after}"
    )


def repeat_offense(decision: Decision, *, earlier: int, rule: RepeatOffender = REPEAT_OFFENDER) -> Decision:
    """`decision` as it stands, or a quarantine if its node was remediated `earlier` times within the
    rule's window and this one makes `rule.count`."""
    if decision.action is Action.NONE or earlier + 1 < rule.count:
        return decision
    days = rule.window / timedelta(days=1)
    suspect = f"GPU {decision.gpu}" if decision.gpu is not None else "the node"
    return Decision(
        Action.QUARANTINE,
        decision.node,
        decision.gpu,
        f"repeat_offender: remediation {earlier + 1} in {days:g} days, suggested RMA of {suspect}; {decision.reason}",
    )


def _gpu_index(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"[0-9]{1,3}", value):
        return None
    return int(value)


def _xid(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"[0-9]{1,5}", value):
        return None
    return int(value)


# The webhook payload.

MAX_ALERTS = 1000
MAX_PAIRS = 64  # labels or annotations per alert
MAX_LABEL_VALUE = 1024
MAX_ANNOTATION_VALUE = 4096
MAX_TEXT = 4096  # receiver, groupKey, externalURL, generatorURL
MAX_ALERT_NAME = 128  # what the record of an alert keeps (remediation.models.Remediation.alert)

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")
FINGERPRINT = re.compile(r"[0-9a-f]{16}")  # Alertmanager's model.Fingerprint, printed as %016x
RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})")
STATUSES = ("firing", "resolved")


class PayloadError(ValueError):
    """The webhook payload has no list of alerts to read; the message names the field."""


@dataclass(frozen=True)
class RefusedAlert:
    """One alert of a payload that cannot be acted on, and why; the payload's other alerts can."""

    index: int  # its place in the payload's `alerts`
    fingerprint: str | None  # Alertmanager's, when the alert carries a well-formed one
    reason: str  # e.g. "alerts[1].labels.node: must not contain the NUL character (U+0000)"


def parse_webhook(payload: object) -> list[Alert | RefusedAlert]:
    """The alerts of an Alertmanager webhook payload (version "4"), read by `parse_alerts`.

    The envelope around them (version, status, receiver, group and common labels...) is checked
    where the payload arrives, by remediation.api.views.AlertmanagerPayloadSerializer; this reads
    only `alerts`, and raises PayloadError if there is no list of them.
    """
    try:
        alerts = v.sequence(v.mapping(payload, "payload").get("alerts"), "alerts", max_items=MAX_ALERTS)
    except v.Invalid as error:
        raise PayloadError(str(error)) from None
    return parse_alerts(alerts)


def parse_alerts(alerts: list) -> list[Alert | RefusedAlert]:
    """One entry per alert, in order: the parsed Alert or, for an alert that is malformed, a
    RefusedAlert saying why.

    Fields Alertmanager documents are checked for presence, type and size; fields it may add
    within version 4 are ignored (it added `truncatedAlerts` without a new version). Text that no
    record can store (a NUL character, a lone surrogate: core.parsing.check_text) refuses the
    alert that carries it.
    """
    return [_alert_or_refusal(item, index) for index, item in enumerate(alerts)]


def label_set(value: object, path: str) -> dict[str, str]:
    """Prometheus labels: names of its alphabet, values of at most MAX_LABEL_VALUE characters."""
    return _pairs(value, path, MAX_LABEL_VALUE, LABEL_NAME.fullmatch)


def annotation_set(value: object, path: str) -> dict[str, str]:
    # Annotation names are free-form in Alertmanager.
    return _pairs(value, path, MAX_ANNOTATION_VALUE, lambda name: 0 < len(name) <= 128)


def _alert_or_refusal(item: object, index: int) -> Alert | RefusedAlert:
    where = f"alerts[{index}]"
    try:
        check_text(item, where)
        return _alert(item, where)
    except InvalidInput as error:
        fingerprint = item.get("fingerprint") if isinstance(item, dict) else None
        well_formed = isinstance(fingerprint, str) and FINGERPRINT.fullmatch(fingerprint)
        return RefusedAlert(index=index, fingerprint=fingerprint if well_formed else None, reason=str(error))


def _alert(item: object, where: str) -> Alert:
    item = v.mapping(item, where)
    status = v.one_of(item.get("status"), f"{where}.status", STATUSES)
    labels = label_set(item.get("labels"), f"{where}.labels")
    if not labels.get("alertname"):
        raise v.Invalid(f"{where}.labels.alertname", "required")
    name = v.text(labels["alertname"], f"{where}.labels.alertname", min_length=0, max_length=MAX_ALERT_NAME)
    annotations = annotation_set(item.get("annotations", {}), f"{where}.annotations")
    starts_at = _timestamp(item.get("startsAt"), f"{where}.startsAt")
    _timestamp(item.get("endsAt"), f"{where}.endsAt")
    if "generatorURL" in item:
        v.text(item["generatorURL"], f"{where}.generatorURL", min_length=0, max_length=MAX_TEXT)
    fingerprint = v.matches(
        item.get("fingerprint"), f"{where}.fingerprint", FINGERPRINT, "16 lowercase hexadecimal digits"
    )
    return Alert(
        name=name,
        status=status,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(annotations),
        fingerprint=fingerprint,
        starts_at=starts_at,
    )


def _pairs(value: object, path: str, max_value: int, valid_name: Callable[[str], object]) -> dict[str, str]:
    pairs = v.mapping(value, path, max_items=MAX_PAIRS, expected="an object of strings")
    for name, item in pairs.items():
        if not isinstance(name, str) or not valid_name(name):
            raise v.Invalid(path, f"invalid name {str(name)[:64]!r}", name)
        v.text(item, v.at(path, name), min_length=0, max_length=max_value)
    return dict(pairs)


def _timestamp(value: object, path: str) -> str:
    if isinstance(value, str) and RFC3339.fullmatch(value):
        try:
            # Checks the calendar (no 31 February); fromisoformat takes at most 6 fractional digits.
            datetime.fromisoformat(re.sub(r"\.[0-9]+", "", value).replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return value
    raise v.Invalid(path, "must be an RFC 3339 timestamp", value)
