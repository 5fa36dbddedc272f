"""What each alert calls for: the XID table and the other alerts' rules, decided into a ladder's
first rung (or nothing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from remediation.rules.agent_reports import AGENT_XID_REPORT
from remediation.rules.alerts import Alert
from remediation.rules.ladders import GPU_STEPS, LADDERS, Decision, Mode, Step
from remediation.rules.sel_entries import SEL_ALERTS, sel_rule


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
        alert_rule = ALERTS[alert.name]
        name, reason = alert_rule.ladder, f"{alert.name}{on_gpu}: {alert_rule.reason}"
    elif alert.name in SEL_ALERTS.values():
        name, reason = sel_rule(alert, gpu)
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


def _gpu_index(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"[0-9]{1,3}", value):
        return None
    return int(value)


def _xid(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"[0-9]{1,5}", value):
        return None
    return int(value)
