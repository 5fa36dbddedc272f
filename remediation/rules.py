"""Alertmanager alerts -> remediation actions: the XID table, the other alerts' rules, the webhook payload,
and the BMC event log entries read as alerts.

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

Two more sources are read as alerts and decided by the same rules: the XIDs a node's agent reports
the moment it sees them (`agent_report`), and the new entries of each BMC's system event log (SEL),
which the control plane reads (workflows/bmc_event_logs.py, `sel_entry`). What an entry calls for
rests on the BMC's severity, since the BMC knows what we do not (a power supply that fails is a
Warning while a redundant one carries the node, Critical when none does):

- Critical (`BMCCriticalEvent`): hardware failed, `hardware_failed`: quarantined for an operator.
  But a platform error at a GPU (DMTF's PlatformErrorAtLocation, the entry's OriginOfCondition a
  GPU Processor) is the GPU's PCIe link lost, what XID 79 reports from the driver's side: XID 79's
  ladder, `gpu_lost` (a reboot, then a power cycle, bring most back). The agent's report and the
  SEL entry of one such fault are one occurrence, acted on once (remediation.services).
- Warning (`BMCWarningEvent`): recorded, nothing done (`none`): a fan, a redundant power supply.
- OK, or no severity: nothing to record.

An entry's reason reads `sel: <MessageId>: <Message>`. A tenant with root on its node can add SEL
entries through the BMC's in-band interface, as it can report XIDs: for its own node only, capped.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import MappingProxyType

from core import validation
from core.parsing import InvalidInput, check_text


class Step(enum.StrEnum):
    """A rung of a remediation ladder, weakest first."""

    GPU_RESET = "gpu_reset"  # through the node's agent: the tenant keeps the node and its other GPUs
    REBOOT = "reboot"  # Redfish GracefulRestart, ForceRestart if the OS ignores it
    POWER_CYCLE = "power_cycle"  # Redfish PowerCycle: the GPUs lose power
    QUARANTINE = "quarantine"  # out of service for an operator; a tenant gets a replacement


# The rungs that take the whole node, and so the tenant's work on every GPU, for a while.
NODE_STEPS = frozenset({Step.REBOOT, Step.POWER_CYCLE})
# The rungs that need a GPU to aim at.
GPU_STEPS = frozenset({Step.GPU_RESET})


class Mode(enum.StrEnum):
    ENFORCE = "enforce"
    # Decided and recorded, never acted on: how a new rule earns the operators' trust.
    SHADOW = "shadow"


@dataclass(frozen=True)
class Ladder:
    """What a class of fault calls for: rungs climbed in order until the GPU is healthy again.

    A GPU still unhealthy after the last repair rung is quarantined, whether or not the ladder
    names that rung: a known-faulty GPU is never left in service."""

    steps: tuple[Step, ...]  # () calls for no action
    notify_tenant: bool = False  # tell the node's tenant (webhook node.remediation) before each rung
    # How long a rung that takes the node (NODE_STEPS) waits, once the tenant is told, for the
    # tenant to let go of it; 0 acts at once.
    drain: timedelta = timedelta(0)
    mode: Mode = Mode.ENFORCE

    def after(self, step: Step) -> Step:
        """The rung to climb when `step` did not make the GPU healthy."""
        later = self.steps[self.steps.index(step) + 1 :] if step in self.steps else ()
        return later[0] if later else Step.QUARANTINE


# The ladders, by name; the XID table and the alert rules name one each. Recorded on every
# remediation (its `action`), so renaming one orphans its history: add a new name instead.
LADDERS: Mapping[str, Ladder] = MappingProxyType(
    {
        # Informational: the driver cleaned up after an application, nothing is wrong.
        "none": Ladder(()),
        # The tenant's own job failed on a healthy GPU: they hear of it, nothing else is done.
        "application": Ladder((), notify_tenant=True),
        # A hung GPU: a reset usually clears it; a reboot takes every GPU of the node from the
        # tenant, so they get a quarter of an hour to checkpoint first.
        "gpu_hang": Ladder(
            (Step.GPU_RESET, Step.REBOOT, Step.QUARANTINE), notify_tenant=True, drain=timedelta(minutes=15)
        ),
        # Memory errors the driver contained (or remapped) pending a reset; the handoff's GPU memory
        # wipe and the repeat-offender rule catch memory that keeps failing.
        "gpu_memory": Ladder(
            (Step.GPU_RESET, Step.REBOOT, Step.QUARANTINE), notify_tenant=True, drain=timedelta(minutes=15)
        ),
        # The GPU is lost to the host (off the bus, NVLink down, GSP dead): the tenant's work on it
        # is already gone, so the node is rebooted at once, then power cycled.
        "gpu_lost": Ladder((Step.REBOOT, Step.POWER_CYCLE, Step.QUARANTINE), notify_tenant=True),
        # Hardware that no reset repairs (spare memory rows exhausted, escaped ECC, NVLink5 faults):
        # out of service for an operator and likely an RMA.
        "hardware_failed": Ladder((Step.QUARANTINE,), notify_tenant=True),
    }
)


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
    rule: str  # the ladder's name in LADDERS
    step: Step | None  # the rung to climb now; None when nothing is (or is left) to do
    node: str | None
    gpu: int | None
    reason: str  # e.g. "XID 79 on GPU 3: GPU has fallen off the bus"
    mode: Mode = Mode.ENFORCE

    @property
    def ladder(self) -> Ladder:
        return LADDERS[self.rule]


@dataclass(frozen=True)
class XidRule:
    nvidia_action: str  # NVIDIA's "Resolution Bucket (Immediate Action)"
    ladder: str
    what: str


# Source: NVIDIA, "Xid Errors", Xid catalog for Ampere and newer GPUs, column "Resolution Bucket
# (Immediate Action)": https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
# Our ladders climb from NVIDIA's immediate action (RESET_GPU, RESTART_BM) and end, where it does
# not help, in quarantine: a GPU still faulty after its repairs never serves the next tenant.
# Faults no reset repairs skip to quarantine.
XIDS: Mapping[int, XidRule] = MappingProxyType(
    {
        # Memory errors contained, or remapped, pending a reset.
        48: XidRule("WORKFLOW_XID_48", "gpu_memory", "double-bit ECC error"),
        63: XidRule("IGNORE", "gpu_memory", "ECC page retired or row remapped: takes effect at a GPU reset"),
        64: XidRule("RESET_GPU", "gpu_memory", "ECC page retirement or row remapping failed"),
        94: XidRule("RESTART_APP", "gpu_memory", "contained uncorrectable ECC error"),
        95: XidRule("RESET_GPU", "gpu_memory", "uncontained uncorrectable ECC error"),
        # Lost to the host: a reboot, then a power cycle, brings most back.
        62: XidRule("RESET_GPU", "gpu_lost", "internal micro-controller (PMU) halted"),
        74: XidRule("WORKFLOW_NVLINK_ERR", "gpu_lost", "NVLink error"),
        79: XidRule("RESTART_BM", "gpu_lost", "GPU has fallen off the bus"),
        119: XidRule("RESET_GPU", "gpu_lost", "GSP RPC timeout"),
        120: XidRule("RESET_GPU", "gpu_lost", "GSP error"),
        # No reset repairs these.
        92: XidRule("IGNORE", "hardware_failed", "excessive single-bit ECC errors: memory is degrading"),
        140: XidRule("RESET_GPU", "hardware_failed", "unrecoverable ECC error escaped containment"),
        144: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink SAW error"),
        145: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink RLW error"),
        146: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink TLW error"),
        147: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink TREX error"),
        148: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink NVLPW control error"),
        149: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink NETIR error"),
        150: XidRule("WORKFLOW_NVLINK5_ERR", "hardware_failed", "NVLink MSE error"),
        # GPU hangs and recoverable events that NVIDIA resolves with a GPU reset.
        46: XidRule("RESET_GPU", "gpu_hang", "GPU stopped processing (timeout)"),
        109: XidRule("RESET_GPU", "gpu_hang", "context switch timeout"),
        110: XidRule("RESET_GPU", "gpu_hang", "security fault"),
        136: XidRule("RESET_GPU", "gpu_hang", "NVLink link training failed"),
        143: XidRule("RESET_GPU", "gpu_hang", "GPU initialisation error"),
        155: XidRule("RESET_GPU", "gpu_hang", "NVLink software-defined error"),
        156: XidRule("RESET_GPU", "gpu_hang", "resource retirement pending a reset"),
        158: XidRule("RESET_GPU", "gpu_hang", "GPU fatal timeout"),
        # Application-level: the tenant's job failed, the GPU is fine; the tenant is told.
        8: XidRule("RESTART_APP", "application", "GPU stopped processing an application's work"),
        13: XidRule("RESTART_APP", "application", "graphics engine exception (application error)"),
        31: XidRule("RESTART_APP", "application", "GPU memory page fault (application error)"),
        32: XidRule("RESTART_APP", "application", "invalid or corrupted push buffer stream"),
        69: XidRule("RESTART_APP", "application", "graphics engine class error (application error)"),
        # Informational.
        43: XidRule("IGNORE", "none", "GPU stopped processing an application's channel"),
        45: XidRule("WORKFLOW_XID_45", "none", "preemptive cleanup after an application stopped"),
    }
)


@dataclass(frozen=True)
class AlertRule:
    ladder: str
    reason: str


# The alerts of deploy/prometheus/rules/gpu.yml other than the XID alerts.
ALERTS: Mapping[str, AlertRule] = MappingProxyType(
    {
        # The agent runs on the tenant's machine, where root can stop it: not a reason to reboot it.
        "NodeAgentDown": AlertRule("hardware_failed", "node agent unreachable: its GPUs' health cannot be observed"),
        "GPUUncorrectableECC": AlertRule("gpu_memory", "uncorrectable (double-bit) ECC errors"),
        "GPURowRemapFailure": AlertRule("hardware_failed", "row remapping failed: no spare memory rows left"),
        "GPUUnhealthy": AlertRule("gpu_hang", "the node agent reports the GPU unhealthy"),
        # The GPU throttles and shuts itself down to protect itself; the usual cause is cooling,
        # which taking one node out does not fix. Operators are told, nothing is done.
        "GPUOverTemperature": AlertRule("none", "GPU over temperature"),
    }
)

# The XID alerts, each selecting the XIDs whose ladder is one of its own (`xids_of`): a critical
# one for the XIDs whose first rung takes the node, a warning for those a GPU reset may clear,
# and one for the tenant's application faults. `decide` takes the ladder from the XID table, not
# from the alert's name, so the table stays the one source of truth.
XID_ALERTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "GPUFatalXid": frozenset({"gpu_lost", "hardware_failed"}),
        "GPUResetRequiredXid": frozenset({"gpu_hang", "gpu_memory"}),
        "GPUApplicationXid": frozenset({"application"}),
    }
)


# What the node's agent reports the moment it sees an XID (POST /v1/agents/{node}/xids), read as
# an alert of its own: the XID table decides it as it decides Prometheus' XID alerts.
AGENT_XID_REPORT = "AgentXidReport"
# How far apart an agent's report and Alertmanager's alert may be and still be one occurrence:
# the XID alerts' increase() window, the longest an alert can follow the XID it fires for.
SAME_OCCURRENCE = timedelta(minutes=5)
# Clocks of the agent and of Prometheus may disagree by this much.
CLOCK_SKEW = timedelta(seconds=30)


def agent_report(*, node: str, gpu: int, xid: int, occurrence: int, seen_at: str) -> Alert:
    """An agent's XID report as an alert. Its key (fingerprint, startsAt) is the occurrence: the
    agent retries a report with the same occurrence and seen_at, which is then recorded once."""
    seen_at = _timestamp(seen_at, "seen_at")
    key = hashlib.sha256(f"{node}/{gpu}/{xid}/{occurrence}".encode()).hexdigest()[:16]
    labels = {"node": node, "gpu": str(gpu), "xid": str(xid), "occurrence": str(occurrence), "source": "agent"}
    return Alert(
        name=AGENT_XID_REPORT,
        status="firing",
        labels=MappingProxyType({"alertname": AGENT_XID_REPORT, **labels}),
        annotations=MappingProxyType({}),
        fingerprint=key,
        starts_at=seen_at,
    )


# A BMC's SEL entries, by severity (Redfish's LogEntry.Severity); OK entries call for nothing.
BMC_CRITICAL_EVENT = "BMCCriticalEvent"
BMC_WARNING_EVENT = "BMCWarningEvent"
SEL_ALERTS: Mapping[str, str] = MappingProxyType({"Critical": BMC_CRITICAL_EVENT, "Warning": BMC_WARNING_EVENT})
# (registry, message key) of the MessageIds (Registry.Major.Minor[.Errata].Key, any version) that,
# at a GPU, mean the GPU is lost to the host.
GPU_LOST_MESSAGES = frozenset({("Platform", "PlatformErrorAtLocation")})
# A GPU as a Processor of the System (bmcsim's Id: GPU and its index).
GPU_PROCESSOR = re.compile(r"/Processors/GPU([0-9]{1,3})$")


def sel_entry(node: str, entry: object) -> Alert | None:
    """A SEL entry (a Redfish LogEntry) as an alert, or None for one of severity OK (or none).

    Its key (fingerprint, startsAt) is the node, the entry's Id and its Created: an entry read twice
    is recorded once, and a log whose Ids started again is told apart. An entry with no readable
    Created is keyed by its Id alone. Raises InvalidInput for an entry that cannot be read or stored."""
    entry = validation.mapping(entry, "entry")
    name = SEL_ALERTS.get(entry.get("Severity"))
    if name is None:
        return None
    entry_id = validation.text(entry.get("Id"), "entry.Id", max_length=128)
    message_id = validation.text(
        entry.get("MessageId", ""), "entry.MessageId", min_length=0, max_length=MAX_LABEL_VALUE
    )
    message = validation.text(entry.get("Message", ""), "entry.Message", min_length=0, max_length=MAX_ANNOTATION_VALUE)
    check_text([entry_id, message_id, message], "entry")
    try:
        starts_at = _timestamp(entry.get("Created"), "entry.Created")
    except validation.Invalid:
        starts_at = ""
    labels = {"alertname": name, "node": node, "entry": entry_id, "message_id": message_id, "source": "bmc"}
    if (gpu := _gpu_of_origin(entry.get("Links"))) is not None:
        labels["gpu"] = str(gpu)
    return Alert(
        name=name,
        status="firing",
        labels=MappingProxyType(labels),
        annotations=MappingProxyType({"message": message}),
        fingerprint=hashlib.sha256(f"{node}/sel/{entry_id}".encode()).hexdigest()[:16],
        starts_at=starts_at,
    )


def _gpu_of_origin(links: object) -> int | None:
    """The index of the GPU Processor an entry's Links.OriginOfCondition names, if it names one."""
    origin = links.get("OriginOfCondition") if isinstance(links, dict) else None
    path = origin.get("@odata.id") if isinstance(origin, dict) else None
    found = GPU_PROCESSOR.search(path) if isinstance(path, str) else None
    return int(found.group(1)) if found else None


def _sel_rule(alert: Alert, gpu: int | None) -> tuple[str, str]:
    """The ladder and the reason of a SEL entry's alert (see the module's docstring)."""
    message_id = alert.labels.get("message_id", "")
    reason = ": ".join(part for part in ("sel", message_id, alert.annotations.get("message", "")) if part)
    if alert.name == BMC_WARNING_EVENT:
        return "none", reason
    parts = message_id.split(".")
    if gpu is not None and (parts[0], parts[-1]) in GPU_LOST_MESSAGES:
        return "gpu_lost", reason
    return "hardware_failed", reason


def is_xid_alert(name: str) -> bool:
    return name in XID_ALERTS or name == AGENT_XID_REPORT


def xids_of(alert_name: str) -> frozenset[int]:
    """The XIDs the XID alert `alert_name` of gpu.yml must select."""
    return frozenset(xid for xid, rule in XIDS.items() if rule.ladder in XID_ALERTS[alert_name])


def decide(alert: Alert, *, shadow: frozenset[str] = frozenset()) -> Decision:
    """The ladder an alert calls for, and its first rung. A resolved alert never returns a node: it
    calls for nothing. The ladders named in `shadow` run in shadow mode whatever LADDERS says."""
    node = alert.labels.get("node") or None
    gpu = _gpu_index(alert.labels.get("gpu"))
    on_gpu = f" on GPU {gpu}" if gpu is not None else ""
    if alert.status == "resolved":
        return _nothing(node, gpu, f"{alert.name} resolved: resolved alerts return nothing to service")
    if node is None:
        return _nothing(None, gpu, f"{alert.name} has no node label: nothing to act on")
    if is_xid_alert(alert.name):
        xid = _xid(alert.labels.get("xid"))
        if xid is None:
            return _nothing(node, gpu, f"{alert.name} has no valid xid label")
        rule = XIDS.get(xid)
        if rule is None:
            return _nothing(node, gpu, f"XID {xid}{on_gpu}: not in the XID table, no automatic action")
        name, reason = rule.ladder, f"XID {xid}{on_gpu}: {rule.what}"
    elif alert.name in ALERTS:
        rule = ALERTS[alert.name]
        name, reason = rule.ladder, f"{alert.name}{on_gpu}: {rule.reason}"
    elif alert.name in SEL_ALERTS.values():
        name, reason = _sel_rule(alert, gpu)
    else:
        return _nothing(node, gpu, f"no rule for alert {alert.name}")
    ladder = LADDERS[name]
    mode = Mode.SHADOW if name in shadow else ladder.mode
    steps = ladder.steps
    if gpu is None and steps and steps[0] in GPU_STEPS:
        # A reset needs a GPU to aim at; without one the ladder starts at its first whole-node rung.
        steps = tuple(step for step in steps if step not in GPU_STEPS) or (Step.QUARANTINE,)
        reason = f"{reason} (no gpu label, so no GPU to reset)"
    return Decision(name, steps[0] if steps else None, node, gpu, reason, mode)


def _nothing(node: str | None, gpu: int | None, reason: str) -> Decision:
    return Decision("none", None, node, gpu, reason)


_DONE = {Step.GPU_RESET: "a GPU reset", Step.REBOOT: "a reboot", Step.POWER_CYCLE: "a power cycle"}


def after_step(decision: Decision, *, healthy: bool, why: str = "") -> Decision:
    """What follows a repair rung: nothing if the GPU is healthy again, else the ladder's next
    rung; `why` says what went wrong with the rung, if something did."""
    if decision.step not in _DONE:
        raise ValueError(f"after_step follows a repair rung, not {decision.step}")
    done = _DONE[decision.step]
    if healthy:
        return replace(decision, step=None, reason=f"{decision.reason}; healthy after {done}")
    after = f": {why}" if why else ""
    reason = f"{decision.reason}; still unhealthy after {done}{after}"
    return replace(decision, step=decision.ladder.after(decision.step), reason=reason)


def repeat_offense(decision: Decision, *, earlier: int, rule: RepeatOffender = REPEAT_OFFENDER) -> Decision:
    """`decision` as it stands, or a quarantine if its node was remediated `earlier` times within the
    rule's window and this one makes `rule.count`."""
    if decision.step is None or earlier + 1 < rule.count:
        return decision
    days = rule.window / timedelta(days=1)
    suspect = f"GPU {decision.gpu}" if decision.gpu is not None else "the node"
    offense = f"repeat_offender: remediation {earlier + 1} in {days:g} days, suggested RMA of {suspect}"
    return replace(decision, step=Step.QUARANTINE, reason=f"{offense}; {decision.reason}")


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
        alerts = validation.sequence(
            validation.mapping(payload, "payload").get("alerts"), "alerts", max_items=MAX_ALERTS
        )
    except validation.Invalid as error:
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
    item = validation.mapping(item, where)
    status = validation.one_of(item.get("status"), f"{where}.status", STATUSES)
    labels = label_set(item.get("labels"), f"{where}.labels")
    if not labels.get("alertname"):
        raise validation.Invalid(f"{where}.labels.alertname", "required")
    name = validation.text(labels["alertname"], f"{where}.labels.alertname", min_length=0, max_length=MAX_ALERT_NAME)
    annotations = annotation_set(item.get("annotations", {}), f"{where}.annotations")
    starts_at = _timestamp(item.get("startsAt"), f"{where}.startsAt")
    _timestamp(item.get("endsAt"), f"{where}.endsAt")
    if "generatorURL" in item:
        validation.text(item["generatorURL"], f"{where}.generatorURL", min_length=0, max_length=MAX_TEXT)
    fingerprint = validation.matches(
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
    pairs = validation.mapping(value, path, max_items=MAX_PAIRS, expected="an object of strings")
    for name, item in pairs.items():
        if not isinstance(name, str) or not valid_name(name):
            raise validation.Invalid(path, f"invalid name {str(name)[:64]!r}", name)
        validation.text(item, validation.at(path, name), min_length=0, max_length=max_value)
    return dict(pairs)


def _timestamp(value: object, path: str) -> str:
    if isinstance(value, str) and RFC3339.fullmatch(value):
        try:
            datetime.fromisoformat(value)  # checks the calendar: no 31 February
        except ValueError:
            pass
        else:
            return value
    raise validation.Invalid(path, "must be an RFC 3339 timestamp", value)
