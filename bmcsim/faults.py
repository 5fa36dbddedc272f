"""Fault injection: parse a request, apply it to a node, clear it.

Kinds (POST /bmcsim/v1/faults with {"node", "kind", ...}):
- xid {"gpu", "xid", "clears"?}: the GPU reports that XID; it counts in the metrics (once, when
  injected) and the GPU turns unhealthy until the fault is cleared.
- ecc_dbe {"gpu", "clears"?}: the GPU reports an uncorrectable (double-bit) ECC error, and a row
  remapped for it.
- row_remap_failure {"gpu", "clears"?}: the GPU could not remap a failing memory row.
- diag_fail {"gpu", "test"}: the agent's diagnostics fail that test (one of agent.sim's
  DIAGNOSTIC_TESTS, in a run whose level includes it) on that GPU; the GPU's health is unchanged.
- implant: the node's kernel image is replaced by a tampered one; the next boot measures it,
  a disk secure erase does not remove it, clearing the fault (the operator's reflash) does.
- bmc_error: the node's BMC answers 500.
- bmc_timeout: the node's BMC does not answer until the fault is cleared (at most HANG_S seconds).
- erase_hang / erase_fail: a drive secure erase or GPU memory wipe started while set never
  ends / ends in failure.
- agent_down: the node's in-band agent answers 503.
- corrupt_media: a medium inserted while set arrives altered: its checksum is not the image's.
- os_hang: the running OS ignores the BMC's graceful restart and shutdown; forced resets still work.
- cc_mode {"mode": "off" or "devtools"}: the GPUs report that confidential-computing mode
  instead of "on" (an extension, so attestation can be shown refusing it).

`clears` says what, beside DELETE /bmcsim/v1/faults, ends a GPU health fault (xid, ecc_dbe,
row_remap_failure); each action also ends what a weaker one does:
- "gpu_reset": a GPU reset of that GPU through its agent (POST /gpu-reset) that succeeds; the GPU
  reads healthy once the reset has finished.
- "reboot": a reboot of the node (Redfish GracefulRestart or ForceRestart; a hung OS ignores a
  graceful one), not a GPU reset.
- "power_cycle": the GPUs losing power (ForceOff or GracefulShutdown, then On; or PowerCycle), not
  a reset or a reboot.
- "never" (the default, what faults did before `clears` existed): nothing but the admin API.
The XID counter keeps its count when the fault goes (counters never go down); no new XID follows.
A fault is stored, and listed, with "clears" only when the request gave it.
"""

from __future__ import annotations

from agent.sim import DIAGNOSTIC_TESTS

from .state import CLEARS, Fleet, NodeState

KINDS = (
    "xid",
    "ecc_dbe",
    "row_remap_failure",
    "implant",
    "bmc_error",
    "bmc_timeout",
    "erase_hang",
    "erase_fail",
    "agent_down",
    "corrupt_media",
    "os_hang",
    "cc_mode",
    "diag_fail",
)
GPU_KINDS = ("xid", "ecc_dbe", "row_remap_failure", "diag_fail")
CLEARABLE_KINDS = ("xid", "ecc_dbe", "row_remap_failure")
TESTS = tuple(test for level in sorted(DIAGNOSTIC_TESTS) for test in DIAGNOSTIC_TESTS[level])
CC_MODES = ("on", "off", "devtools")
HANG_S = 120.0


class FaultError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def inject(fleet: Fleet, payload: object) -> tuple[NodeState, dict]:
    """Validate a fault request and apply it; returns the node and the fault as stored."""
    if not isinstance(payload, dict):
        raise FaultError(400, "body must be a JSON object with 'node' and 'kind'")
    name, kind = payload.get("node"), payload.get("kind")
    if not isinstance(name, str) or not name:
        raise FaultError(400, "'node' is required")
    if kind not in KINDS:
        raise FaultError(400, f"'kind' must be one of {', '.join(KINDS)}")
    node = fleet.nodes.get(name)
    if node is None:
        raise FaultError(404, f"no node named {name!r}")
    if kind in GPU_KINDS:
        gpu = payload.get("gpu")
        gpus = len(node.spec.gpus)
        if not _is_int(gpu) or not 0 <= gpu < gpus:
            raise FaultError(400, f"'gpu' must be an integer from 0 to {gpus - 1}")
    clears = {}
    if kind in CLEARABLE_KINDS and "clears" in payload:
        if payload["clears"] not in CLEARS:
            raise FaultError(400, f"'clears' must be one of {', '.join(CLEARS)}")
        clears = {"clears": payload["clears"]}
    if kind in ("ecc_dbe", "row_remap_failure"):
        fault = {"kind": kind, "gpu": gpu, **clears}
        node.faults.append(fault)
    elif kind == "diag_fail":
        test = payload.get("test")
        if test not in TESTS:
            raise FaultError(400, f"'test' must be one of {', '.join(TESTS)}")
        fault = {"kind": kind, "gpu": gpu, "test": test}
        node.faults.append(fault)
    elif kind == "xid":
        xid = payload.get("xid")
        if not _is_int(xid) or not 1 <= xid <= 65535:
            raise FaultError(400, "'xid' must be an integer from 1 to 65535")
        fault = {"kind": "xid", "gpu": gpu, "xid": xid, **clears}
        per_gpu = node.xid_counts.setdefault(str(gpu), {})
        per_gpu[str(xid)] = per_gpu.get(str(xid), 0) + 1
        node.faults.append(fault)
    elif kind == "cc_mode":
        mode = payload.get("mode")
        if mode not in CC_MODES:
            raise FaultError(400, f"'mode' must be one of {', '.join(CC_MODES)}")
        fault = {"kind": "cc_mode", "mode": mode}
        node.faults = [f for f in node.faults if f["kind"] != "cc_mode"] + [fault]
    else:
        fault = {"kind": kind}
        if not node.has_fault(kind):
            node.faults.append(fault)
    fleet.touch(node)
    return node, fault


def clear(fleet: Fleet, name: str | None) -> int:
    """Clear every fault, or one node's; returns how many were cleared."""
    if name is not None and name not in fleet.nodes:
        raise FaultError(404, f"no node named {name!r}")
    nodes = [fleet.nodes[name]] if name is not None else [n for n in fleet.nodes.values() if n.faults]
    cleared = 0
    for node in nodes:
        cleared += len(node.faults)
        node.faults = []
        fleet.touch(node)
    return cleared


def listing(fleet: Fleet) -> list[dict]:
    return [{"node": n.name, **f} for n in fleet.nodes.values() for f in n.faults]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
