"""Fault injection: parse a request, apply it to a node, a fabric switch or a fabric's managers, clear it.

Kinds of a node (POST /bmcsim/v1/faults with {"node", "kind", ...}):
- xid {"gpu", "xid", "clears"?}: the GPU reports that XID; it counts in the metrics (once, when
  injected) and the GPU turns unhealthy until the fault is cleared. XID 79 ("GPU has fallen off
  the bus") also puts a Critical entry in the BMC's SEL, as a BMC logs the PCIe link it lost.
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
- firmware_tamper {"component": "BIOS", "BMC", "GPU0".."GPU7" or "NIC0", "survives_reflash"?}: the
  component's image is replaced: FirmwareInventory shows its release with a suffix
  (releases.TAMPERED_SUFFIX) and a digest of no release, at once; a tampered GPU's attestation
  report measures that VBIOS; a tampered BIOS is what the next boot runs and measures into PCR 0
  (the implant, by contrast, is a kernel, PCR 9). It survives drive wipes and reboots, and ends
  with a SimpleUpdate of that component (the reflash) unless `survives_reflash` is true, in which
  case the flash completes and the inventory still shows the tampered image. A tampered BIOS
  stays measured until the next boot after the fault ends.
- gpu_measurement_tamper {"gpu"}: the GPU's SPDM measurements (Redfish ComponentIntegrity) differ
  at its VBIOS's block spdm.TAMPERED_INDEX, still signed by the GPU: a VBIOS changed in place,
  which wipes, resets and reboots leave as it is.
- gpu_wrong_nonce {"gpu"}: the GPU's signed measurements carry another nonce than the one asked.
- gpu_broken_chain {"gpu"}: the GPU's SPDM leaf certificate is forged (the provisioner CA's name,
  another key), so it no longer chains to the device identity CA; the measurements still verify
  against the leaf. These three last until DELETE /bmcsim/v1/faults.
- bios_tamper {"attribute"?, "value"?}: one BIOS attribute (default SriovGlobalEnable) is changed in
  the current Attributes (default: to the other of its values, so SR-IOV off). It survives wipes
  and reboots and ends at a boot after which the attribute holds another value (Bios/Settings set
  it back, then a reset that boots). DELETE /bmcsim/v1/faults puts the attribute back.
- sel {"message_id", "severity"?, "message"?, "args"?}: the BMC logs an event in its SEL. The
  MessageIds of bmcsim.sel.EVENTS (PSU, fan, thermal trip, memory ECC, GPU off the bus) come with
  their registry's message and severity; any other needs "severity" (OK, Warning, Critical) and
  gets "message" or its MessageId as the message. An event, not a standing fault: it is not
  listed, and DELETE /bmcsim/v1/faults leaves the SEL as it is (LogService.ClearLog empties it).

Kinds of a fabric switch (POST /bmcsim/v1/faults with {"switch", "kind", ...}; the switches are
core.topology.fabric_switches', listed in the inventory; what their ports do is in fabric.py):
- switch_down: the switch is offline (Redfish State UnavailableOffline, Health Critical) and every
  link of its ports is down, seen from both ends of each cable, until cleared.
- port_flap {"port", "period_s"?}: the link on that port (named after the node or switch it
  reaches) goes down for `period_s` (default FLAP_PERIOD_S, simulated time), up for as long, and
  so on, seen from both ends; the switch's Health is Warning while it flaps. Injected again on the
  same port, it starts over with the new period.
Both are listed with "switch" instead of "node", and end with DELETE /bmcsim/v1/faults (all) or
?switch=<name> (that switch's).

Kinds of a fabric (POST /bmcsim/v1/faults with {"fabric": "ethernet", "infiniband" or "nvlink",
"kind", ...}; the managers bmcsim simulates for it are in fabric_managers/):
- fabric_api_down: every call of that fabric's managers' API answers 503.
- fabric_apply_fails: reads work; every change fails as the real manager reports a failure.
- fabric_slow: every call of that fabric's API waits SLOW_S simulated seconds first.
These three stand until cleared, are listed with "fabric", and end with DELETE /bmcsim/v1/faults
(all) or ?fabric=<kind> (that fabric's); injected again, a standing one stays as it is.
- fabric_drift {"node", "segment"?}: an act, not listed: someone moves the node's port(s) by hand,
  outside the manager's API (its leaf port, its HCA GUIDs or its GPUs), into `segment` ("1001", a
  VLAN; "0x1001", a P_Key, as a full member; an NVLink partition's name) or, without one, a
  segment the manager picks. Answered with what moved: {"port", "from", "to"}.

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

import re
import time
from typing import TypeGuard

from agent.sim import DIAGNOSTIC_TESTS

from . import bios, releases, sel, spdm
from .fabric import PORT_FLAP, SWITCH_DOWN
from .fabric_managers import ETHERNET, FABRIC_DRIFT, FABRICS, INFINIBAND, NVLINK, STANDING_KINDS, nmx
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
    "firmware_tamper",
    "bios_tamper",
    "sel",
    *spdm.KINDS,
    SWITCH_DOWN,
    PORT_FLAP,
    *STANDING_KINDS,
    FABRIC_DRIFT,
)
SWITCH_KINDS = (SWITCH_DOWN, PORT_FLAP)
FABRIC_KINDS = (*STANDING_KINDS, FABRIC_DRIFT)
GPU_KINDS = ("xid", "ecc_dbe", "row_remap_failure", "diag_fail", *spdm.KINDS)
CLEARABLE_KINDS = ("xid", "ecc_dbe", "row_remap_failure")
TESTS = tuple(test for level in sorted(DIAGNOSTIC_TESTS) for test in DIAGNOSTIC_TESTS[level])
CC_MODES = ("on", "off", "devtools")
HANG_S = 120.0
GPU_FELL_OFF_THE_BUS = 79
MESSAGE_ID = re.compile(r"[A-Za-z0-9_.]{1,128}")
MAX_MESSAGE_CHARS = 1024
FLAP_PERIOD_S = 5.0
MAX_FLAP_PERIOD_S = 3600.0
VLAN = re.compile(r"[1-9][0-9]{0,3}")  # a drift's Ethernet segment, up to MAX_VLAN
MAX_VLAN = 4094
PKEY = re.compile(r"0x[0-9a-fA-F]{1,4}")  # a drift's InfiniBand segment, up to MAX_PKEY
MAX_PKEY = 0x7FFF  # the partition number: the top bit of a P_Key is the membership
SEGMENTS = {  # what a drift's segment is, per fabric
    ETHERNET: f'a VLAN as a string, "1" to "{MAX_VLAN}" (such as "1001")',
    INFINIBAND: f'a P_Key as a string, "0x0001" to "{MAX_PKEY:#06x}" (such as "0x1001")',
    NVLINK: f"an NVLink partition's name, 1 to {nmx.MAX_NAME} printable ASCII characters",
}


class FaultError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def inject(fleet: Fleet, payload: object, now: float | None = None) -> dict:
    """Validate a fault request and apply it; returns the fault as listed, with its "node" or
    "switch" (a `sel` event, which is not stored: as logged)."""
    now = time.time() if now is None else now
    if not isinstance(payload, dict):
        raise FaultError(400, "body must be a JSON object with 'kind' and 'node' (or 'switch' or 'fabric')")
    kind = payload.get("kind")
    if kind not in KINDS:
        raise FaultError(400, f"'kind' must be one of {', '.join(KINDS)}")
    if kind in SWITCH_KINDS:
        return _switch_fault(fleet, kind, payload, now)
    if kind in FABRIC_KINDS:
        return _fabric_fault(fleet, kind, payload)
    name = payload.get("node")
    if not isinstance(name, str) or not name:
        raise FaultError(400, "'node' is required")
    node = fleet.nodes.get(name)
    if node is None:
        raise FaultError(404, f"no node named {name!r}")
    fault = _gpu_fault(node, kind, payload, now) if kind in GPU_KINDS else _node_fault(node, kind, payload, now)
    fleet.touch(node)
    return {"node": node.name, **fault}


def _gpu_fault(node: NodeState, kind: str, payload: dict, now: float) -> dict:
    gpu = payload.get("gpu")
    gpus = len(node.spec.gpus)
    if not _is_int(gpu) or not 0 <= gpu < gpus:
        raise FaultError(400, f"'gpu' must be an integer from 0 to {gpus - 1}")
    clears = {}
    if kind in CLEARABLE_KINDS and "clears" in payload:
        if payload["clears"] not in CLEARS:
            raise FaultError(400, f"'clears' must be one of {', '.join(CLEARS)}")
        clears = {"clears": payload["clears"]}
    if kind == "diag_fail":
        test = payload.get("test")
        if test not in TESTS:
            raise FaultError(400, f"'test' must be one of {', '.join(TESTS)}")
        fault = {"kind": kind, "gpu": gpu, "test": test}
    elif kind == "xid":
        xid = payload.get("xid")
        if not _is_int(xid) or not 1 <= xid <= 65535:
            raise FaultError(400, "'xid' must be an integer from 1 to 65535")
        fault = {"kind": "xid", "gpu": gpu, "xid": xid, **clears}
        per_gpu = node.xid_counts.setdefault(str(gpu), {})
        per_gpu[str(xid)] = per_gpu.get(str(xid), 0) + 1
        if xid == GPU_FELL_OFF_THE_BUS:
            severity, message_id, message, args, sensor, origin = sel.gpu_off_the_bus(gpu)
            node.sel_append(now, severity, message_id, message, args, sensor, origin)
    else:  # ecc_dbe, row_remap_failure and the SPDM faults
        fault = {"kind": kind, "gpu": gpu, **clears}
    node.faults.append(fault)
    return fault


def _node_fault(node: NodeState, kind: str, payload: dict, now: float) -> dict:
    if kind == "cc_mode":
        mode = payload.get("mode")
        if mode not in CC_MODES:
            raise FaultError(400, f"'mode' must be one of {', '.join(CC_MODES)}")
        fault = {"kind": "cc_mode", "mode": mode}
        node.faults = [f for f in node.faults if f["kind"] != "cc_mode"] + [fault]
        return fault
    if kind == "firmware_tamper":
        return _firmware_tamper(node, payload)
    if kind == "bios_tamper":
        return _bios_tamper(node, payload)
    if kind == "sel":
        return _sel_event(node, payload, now)
    fault = {"kind": kind}
    if not node.has_fault(kind):
        node.faults.append(fault)
    return fault


def clear(fleet: Fleet, node: str | None = None, switch: str | None = None, fabric: str | None = None) -> int:
    """Clear every fault, or one node's, one switch's or one fabric's; returns how many were cleared."""
    if sum(name is not None for name in (node, switch, fabric)) > 1:
        raise FaultError(400, "give one of 'node', 'switch' or 'fabric', not several")
    if node is not None and node not in fleet.nodes:
        raise FaultError(404, f"no node named {node!r}")
    if switch is not None and switch not in fleet.switches:
        raise FaultError(404, f"no switch named {switch!r}")
    if fabric is not None and fabric not in FABRICS:
        raise FaultError(400, f"'fabric' must be one of {', '.join(FABRICS)}")
    fabrics: list[str]
    if node is not None:
        nodes, switches, fabrics = [fleet.nodes[node]], [], []
    elif switch is not None:
        nodes, switches, fabrics = [], [fleet.switches[switch]], []
    elif fabric is not None:
        nodes, switches, fabrics = [], [], [fabric]
    else:
        nodes, switches, fabrics = list(fleet.nodes.values()), list(fleet.switches.values()), list(FABRICS)
    cleared = 0
    for node_state in nodes:
        if node_state.faults:
            cleared += node_state.clear_faults()
            fleet.touch(node_state)
    for switch_state in switches:
        if switch_state.faults:
            cleared += switch_state.clear_faults()
            fleet.touch_switch(switch_state)
    standing = sum(len(fleet.fabric.faults[name]) for name in fabrics)
    if standing:
        fleet.fabric.faults.update({name: {} for name in fabrics})
        fleet.fabric.touch("faults")
    return cleared + standing


def listing(fleet: Fleet) -> list[dict]:
    return (
        [{"node": n.name, **f} for n in fleet.nodes.values() for f in n.faults]
        + [{"switch": s.name, **f} for s in fleet.switches.values() for f in s.faults]
        + [{"fabric": fabric, **f} for fabric, kinds in fleet.fabric.faults.items() for f in kinds.values()]
    )


def _fabric_fault(fleet: Fleet, kind: str, payload: dict) -> dict:
    fabric = payload.get("fabric")
    if fabric not in FABRICS:
        raise FaultError(400, f"'fabric' must be one of {', '.join(FABRICS)}")
    if kind == FABRIC_DRIFT:
        return _fabric_drift(fleet, fabric, payload)
    fault = fleet.fabric.faults[fabric].setdefault(kind, {"kind": kind})
    fleet.fabric.touch("faults")
    return {"fabric": fabric, **fault}


def _fabric_drift(fleet: Fleet, fabric: str, payload: dict) -> dict:
    name = payload.get("node")
    if not isinstance(name, str) or not name:
        raise FaultError(400, "'node' is required")
    if name not in fleet.nodes:
        raise FaultError(404, f"no node named {name!r}")
    segment = payload.get("segment")
    if segment is not None and not _is_segment(fabric, segment):
        raise FaultError(400, f"'segment' must be {SEGMENTS[fabric]}")
    if fabric == NVLINK and not fleet.fabric.gpus[name]:
        raise FaultError(400, f"node {name!r} has no GPUs on NVLink")
    moved = fleet.fabric.drift(fabric, name, segment)
    return {"kind": FABRIC_DRIFT, "fabric": fabric, "node": name, **moved}


def _is_segment(fabric: str, segment: object) -> bool:
    if not isinstance(segment, str):
        return False
    if fabric == ETHERNET:
        return VLAN.fullmatch(segment) is not None and int(segment) <= MAX_VLAN
    if fabric == INFINIBAND:
        return PKEY.fullmatch(segment) is not None and 0 < int(segment, 16) <= MAX_PKEY
    return 0 < len(segment) <= nmx.MAX_NAME and segment.isascii() and segment.isprintable()


def _switch_fault(fleet: Fleet, kind: str, payload: dict, now: float) -> dict:
    name = payload.get("switch")
    if not isinstance(name, str) or not name:
        raise FaultError(400, "'switch' is required")
    switch = fleet.switches.get(name)
    if switch is None:
        raise FaultError(404, f"no switch named {name!r}")
    fault: dict[str, object]
    if kind == SWITCH_DOWN:
        fault = {"kind": kind}
        if not switch.is_down:
            switch.faults.append(fault)
    else:
        port = payload.get("port")
        if port not in switch.spec.ports:
            raise FaultError(400, f"'port' must be one of {', '.join(switch.spec.ports)}")
        period = payload.get("period_s", FLAP_PERIOD_S)
        if not isinstance(period, int | float) or isinstance(period, bool) or not 0 < period <= MAX_FLAP_PERIOD_S:
            raise FaultError(400, f"'period_s' must be a number of seconds above 0, at most {MAX_FLAP_PERIOD_S:g}")
        fault = {"kind": kind, "port": port, "period_s": period, "started_at": now}
        previous = switch.flap(port)
        switch.faults = [f for f in switch.faults if f is not previous] + [fault]
    fleet.touch_switch(switch)
    return {"switch": switch.name, **fault}


def _firmware_tamper(node: NodeState, payload: dict) -> dict:
    components = node.firmware_components()
    component = payload.get("component")
    if component not in components:
        raise FaultError(400, f"'component' must be one of {', '.join(components)}")
    survives = payload.get("survives_reflash", False)
    if not isinstance(survives, bool):
        raise FaultError(400, "'survives_reflash' must be true or false")
    fault = {
        "kind": "firmware_tamper",
        "component": component,
        "version": releases.tampered_version(node.installed(component)),
    }
    if "survives_reflash" in payload:
        fault["survives_reflash"] = survives
    previous = node.firmware_tamper(component)
    node.faults = [f for f in node.faults if f is not previous] + [fault]
    return fault


def _bios_tamper(node: NodeState, payload: dict) -> dict:
    attribute = payload.get("attribute", bios.TAMPER_DEFAULT_ATTRIBUTE)
    if not isinstance(attribute, str) or attribute not in bios.ATTRIBUTES:
        raise FaultError(400, f"'attribute' must be one of {', '.join(bios.ATTRIBUTES)}")
    was = node.bios[attribute]
    value = payload.get("value", bios.other_value(attribute, was))
    if value not in bios.ATTRIBUTES[attribute]:
        raise FaultError(400, f"'value' of {attribute} must be one of {', '.join(bios.ATTRIBUTES[attribute])}")
    fault = {"kind": "bios_tamper", "attribute": attribute, "value": value, "was": was}
    node.bios = {**node.bios, attribute: value}
    node.faults.append(fault)
    return fault


def _sel_event(node: NodeState, payload: dict, now: float) -> dict:
    message_id = payload.get("message_id")
    if not isinstance(message_id, str) or not MESSAGE_ID.fullmatch(message_id):
        raise FaultError(400, "'message_id' must be a MessageId such as " + sel.POWER_SUPPLY_FAILED)
    known = sel.EVENTS.get(message_id)
    severity = payload.get("severity", known.severity if known else None)
    if severity not in sel.SEVERITIES:
        raise FaultError(400, f"'severity' must be one of {', '.join(sel.SEVERITIES)}")
    args = payload.get("args", list(known.args) if known else [])
    if not isinstance(args, list) or not all(isinstance(a, str) and len(a) <= 200 for a in args) or len(args) > 8:
        raise FaultError(400, "'args' must be a list of at most 8 strings")
    message = payload.get("message")
    if message is None and known is not None:
        try:
            message = known.message.format(*args)
        except IndexError:
            raise FaultError(
                400, f"'args' must give the {known.message.count('{')} arguments of {message_id}"
            ) from None
    elif message is None:
        message = message_id
    if not isinstance(message, str) or not 0 < len(message) <= MAX_MESSAGE_CHARS:
        raise FaultError(400, f"'message' must be a string of 1 to {MAX_MESSAGE_CHARS} characters")
    sensor, origin = (known.sensor_type, known.origin) if known else ("", "")
    record = node.sel_append(now, severity, message_id, message, args, sensor, origin)
    return {"kind": "sel", "entry": str(record[0]), "severity": severity, "message_id": message_id, "message": message}


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
