"""A Cumulus Linux leaf switch's NVUE configuration, as bmcsim keeps it: revisions and the applied
config of its bridge (each port's access VLAN, each VLAN's VNI). The HTTP side is
bmcsim/fabric_apis/nvue.py.

The applied config is kept as NVUE's own JSON tree, cut down to what bmcsim models:

    {"bridge": {"domain": {"br_default": {"vlan": {"10": {}, "1001": {"vni": {"5001": {}}}}}}},
     "interface": {"swp1": {"type": "swp", "bridge": {"domain": {"br_default": {"access": 10}}}}}}

A revision is a changeset: the PATCHes staged into it, merged (JSON merge patch: null unsets)
onto whatever is applied when the revision applies, not onto the config it was created from, so
two batches staged side by side on one switch do not undo each other. Applying takes
`delay` seconds; the revision is settled (applied, or `invalid`/`apply_error` with its issues)
by the first `settle` at or after that time, which every API call makes first.

Pure: no aiohttp, no clock (`now` is an argument).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from core.topology import PROVISIONING_VLAN

BRIDGE = "br_default"  # the single VLAN-aware bridge Cumulus Linux configures by default
MAX_VLAN = 4094
MAX_VNI = 16777214
DRIFT_VLAN = 3999  # the first VLAN someone picks by hand for a port of its own (then downwards)
APPLY_FAILURE = "Unable to reload-or-restart services (ifreload -a): exit 1"  # under fabric_apply_fails
MAX_REVISIONS = 64  # kept, the oldest settled ones dropped first
PENDING, APPLYING, APPLIED, INVALID, APPLY_ERROR = "pending", "applying", "applied", "invalid", "apply_error"
PROGRESS = {
    PENDING: "",
    APPLYING: "Applying config",
    APPLIED: "Config update complete",
    INVALID: "Invalid config",
    APPLY_ERROR: "Failure during apply",
}


class NvueError(Exception):
    """A request NVUE refuses: `status` (400, 404) and NVUE's words."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class NvueSwitch:
    def __init__(self, name: str, ports: tuple[str, ...]):
        self.name = name
        self.ports = ports
        self.applied: dict = initial_config(ports)
        self.revisions: dict[str, dict] = {}  # id -> {"state", "patches", "due", "fails", "issue"}, oldest first
        self.serial = 0  # revisions ever created, for their ids

    def dump(self) -> dict:
        return {"applied": self.applied, "revisions": self.revisions, "serial": self.serial}

    def restore(self, data: dict) -> None:
        self.applied = data["applied"]
        self.revisions = data["revisions"]
        self.serial = data["serial"]

    # -- what the rest of bmcsim reads -------------------------------------------------------

    def access_vlan(self, port: str) -> int | None:
        """The VLAN the port is an access port of in the applied config; None: in no bridge."""
        return access_of(self.applied, port)

    def vni(self, vlan: int) -> int | None:
        """The VXLAN VNI the applied config maps the VLAN to (EVPN), if any."""
        bridge = self.applied.get("bridge", {}).get("domain", {}).get(BRIDGE) or {}
        vnis = ((bridge.get("vlan") or {}).get(str(vlan)) or {}).get("vni") or {}
        return int(next(iter(vnis))) if vnis else None

    def drift(self, port: str, segment: str | None) -> dict:
        """Someone moved the port by hand, outside NVUE's revisions: into VLAN `segment`, or (None)
        into another VLAN the switch carries for a tenant, else a VLAN of its own. Returns
        {"port", "from", "to"}."""
        if port not in self.ports:
            raise NvueError(404, f"{self.name} has no interface {port}")
        was = self.access_vlan(port)
        if segment is not None:
            to = _vlan_number(segment)
        else:
            tenants = sorted(
                vlan
                for other in self.ports
                if (vlan := self.access_vlan(other)) not in (None, PROVISIONING_VLAN, was) and other != port
            )
            to = tenants[0] if tenants else self._free_vlan()
        _vlans(self.applied).setdefault(str(to), {})
        self.applied["interface"][port] = _access_port(to)
        return {"port": port, "from": "" if was is None else str(was), "to": str(to)}

    def _free_vlan(self) -> int:
        carried = {int(vlan) for vlan in _vlans(self.applied)}
        return next(vlan for vlan in range(DRIFT_VLAN, 1, -1) if vlan not in carried)

    # -- revisions ---------------------------------------------------------------------------

    def create_revision(self, user: str, now: float) -> str:
        self.serial += 1
        stamp = time.strftime("%Y-%m-%d_%H.%M.%S", time.gmtime(now))
        revision = f"changeset/{user}/{stamp}_{_base36(self.serial):0>4}"
        self.revisions[revision] = {"state": PENDING, "patches": [], "due": None, "fails": False, "issue": {}}
        self._forget_old()
        return revision

    def revision(self, revision: str) -> dict:
        """The revision as NVUE shows it: {"state", "transition": {"issue", "progress"}}."""
        if revision == APPLIED:
            return {"state": APPLIED, "transition": {"issue": {}, "progress": ""}}
        held = self._held(revision)
        return {"state": held["state"], "transition": {"issue": held["issue"], "progress": PROGRESS[held["state"]]}}

    def config(self, revision: str) -> dict:
        """The whole config tree at `revision`: "applied", or a revision's (what is applied now with
        its changeset merged in)."""
        if revision == APPLIED:
            return copy.deepcopy(self.applied)
        held = self._held(revision)
        if held["state"] == APPLIED:  # what it applied is gone under later revisions: show the result
            return copy.deepcopy(self.applied)
        return _merged(self.applied, held["patches"])

    def stage(self, revision: str, patch: Any) -> None:
        """Add a root PATCH (a JSON merge patch of the config tree) to a pending revision."""
        held = self._held(revision)
        if held["state"] != PENDING:
            raise NvueError(400, f"revision {revision} is {held['state']}: only a pending revision takes changes")
        self._check_patch(patch)
        held["patches"].append(patch)

    def apply(self, revision: str, now: float, delay: float, fails: bool) -> dict:
        """Start applying a pending revision; it settles `delay` seconds from `now` (failing, if
        `fails`, as a switch whose services will not reload). Answers as NVUE does at once."""
        held = self._held(revision)
        if held["state"] != PENDING:
            raise NvueError(400, f"revision {revision} is {held['state']}: only a pending revision can be applied")
        held.update(state=APPLYING, due=now + delay, fails=fails)
        return {"state": "apply", "transition": {"issue": {}, "progress": ""}}

    def settle(self, now: float) -> bool:
        """Finish every revision whose apply is due, in the order they were applied. True if any was."""
        due = sorted(
            (held["due"], revision)
            for revision, held in self.revisions.items()
            if held["state"] == APPLYING and held["due"] <= now
        )
        for _, revision in due:
            self._finish(self.revisions[revision])
        return bool(due)

    def _finish(self, held: dict) -> None:
        if held["fails"]:
            held.update(
                state=APPLY_ERROR, issue=_issues(["Unable to reload-or-restart services (ifreload -a): exit 1"])
            )
            return
        merged = _merged(self.applied, held["patches"])
        problems = _problems(merged)
        if problems:
            held.update(state=INVALID, issue=_issues(problems))
            return
        self.applied = merged
        held["state"] = APPLIED

    def _held(self, revision: str) -> dict:
        held = self.revisions.get(revision)
        if held is None:
            raise NvueError(404, f"no revision {revision}")
        return held

    def _forget_old(self) -> None:
        settled = [revision for revision, held in self.revisions.items() if held["state"] not in (PENDING, APPLYING)]
        unsettled = [revision for revision in self.revisions if revision not in settled]
        for revision in (settled + unsettled)[: max(0, len(self.revisions) - MAX_REVISIONS)]:
            del self.revisions[revision]

    def _check_patch(self, patch: Any) -> None:
        """What bmcsim models of NVUE's schema: the bridge's VLANs and their VNIs, and each swp
        port's bridge access VLAN. Anything else is refused as NVUE refuses what its schema lacks."""
        root = _object(patch, "")
        _only(root, ("bridge", "interface"), "")
        if "bridge" in root:
            bridge = _object(root["bridge"], "bridge")
            _only(bridge, ("domain",), "bridge")
            domains = _object(bridge.get("domain"), "bridge.domain")
            _only(domains, (BRIDGE,), "bridge.domain")
            if domains.get(BRIDGE) is not None:
                domain = _object(domains[BRIDGE], f"bridge.domain.{BRIDGE}")
                _only(domain, ("vlan",), f"bridge.domain.{BRIDGE}")
                for vlan, value in _object(domain.get("vlan"), "vlan").items():
                    _vlan_number(vlan)
                    if value is not None:
                        _check_vlan(vlan, value)
        if "interface" in root:
            interfaces = _object(root["interface"], "interface")
            for port, value in interfaces.items():
                if port not in self.ports:
                    raise NvueError(
                        400, f"interface {port!r}: {self.name} has no such port (it has swp1-{len(self.ports)})"
                    )
                if value is not None:
                    _check_interface(port, value)


def initial_config(ports: tuple[str, ...]) -> dict:
    """Every port an access port of the provisioning VLAN, the one VLAN the bridge carries."""
    return {
        "bridge": {"domain": {BRIDGE: {"vlan": {str(PROVISIONING_VLAN): {}}}}},
        "interface": {port: _access_port(PROVISIONING_VLAN) for port in ports},
    }


def access_of(config: dict, port: str) -> int | None:
    domain = ((config.get("interface", {}).get(port) or {}).get("bridge") or {}).get("domain") or {}
    access = (domain.get(BRIDGE) or {}).get("access")
    return access if isinstance(access, int) else None


def _access_port(vlan: int) -> dict:
    return {"type": "swp", "bridge": {"domain": {BRIDGE: {"access": vlan}}}}


def _vlans(config: dict) -> dict:
    bridge = config.setdefault("bridge", {}).setdefault("domain", {}).setdefault(BRIDGE, {})
    return bridge.setdefault("vlan", {})


def _merged(config: dict, patches: list) -> dict:
    merged = copy.deepcopy(config)
    for patch in patches:
        merged = _merge(merged, patch)
    return merged


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as NVUE's PATCH merges: objects merge key by key, null unsets."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _problems(config: dict) -> list[str]:
    """Why NVUE would find the config invalid: an access VLAN the bridge does not carry, a VLAN
    mapped to two VNIs, a VNI mapped from two VLANs."""
    vlans = _vlans(config)
    problems = [
        f"interface {port}: access VLAN {access} is not a VLAN of bridge {BRIDGE}"
        for port in config.get("interface", {})
        if (access := access_of(config, port)) is not None and str(access) not in vlans
    ]
    seen: dict[str, str] = {}
    for vlan, value in vlans.items():
        vnis = list((value or {}).get("vni") or {})
        if len(vnis) > 1:
            problems.append(f"bridge {BRIDGE} VLAN {vlan}: mapped to {len(vnis)} VNIs ({', '.join(vnis)}), one at most")
        for vni in vnis:
            if vni in seen:
                problems.append(f"VNI {vni}: mapped from VLAN {seen[vni]} and VLAN {vlan}")
            seen[vni] = vlan
    return problems


def _issues(messages: list[str]) -> dict:
    return {
        f"{number:05d}": {"code": "generic", "data": {"msg": message}, "message": message, "severity": "error"}
        for number, message in enumerate(messages)
    }


def _check_vlan(vlan: str, value: Any) -> None:
    where = f"bridge.domain.{BRIDGE}.vlan.{vlan}"
    mapped = _object(value, where)
    _only(mapped, ("vni",), where)
    if mapped.get("vni") is not None:
        for vni, settings in _object(mapped["vni"], f"{where}.vni").items():
            if not (vni.isdigit() and 1 <= int(vni) <= MAX_VNI):
                raise NvueError(400, f"{where}.vni: {vni!r} is not a VNI (1-{MAX_VNI})")
            if settings is not None:
                _object(settings, f"{where}.vni.{vni}")


def _check_interface(port: str, value: Any) -> None:
    where = f"interface.{port}"
    interface = _object(value, where)
    _only(interface, ("type", "bridge"), where)
    if interface.get("type") not in (None, "swp"):
        raise NvueError(400, f"{where}.type: {interface['type']!r}, but {port} is a switch port (swp)")
    if interface.get("bridge") is not None:
        bridge = _object(interface["bridge"], f"{where}.bridge")
        _only(bridge, ("domain",), f"{where}.bridge")
        domains = _object(bridge.get("domain"), f"{where}.bridge.domain")
        _only(domains, (BRIDGE,), f"{where}.bridge.domain")
        if domains.get(BRIDGE) is not None:
            member = _object(domains[BRIDGE], f"{where}.bridge.domain.{BRIDGE}")
            _only(member, ("access",), f"{where}.bridge.domain.{BRIDGE}")
            access = member.get("access")
            if access is not None and not (type(access) is int and 1 <= access <= MAX_VLAN):
                raise NvueError(400, f"{where}.bridge.domain.{BRIDGE}.access: {access!r} is not a VLAN (1-{MAX_VLAN})")


def _object(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NvueError(
            400,
            f"{where or 'the body'}: {type(value).__name__} is not valid under any of the given schemas (an object)",
        )
    return value


def _only(value: dict, keys: tuple[str, ...], where: str) -> None:
    extra = sorted(set(value) - set(keys))
    if extra:
        raise NvueError(400, f"{where or 'the root'}: additional properties are not allowed here ({', '.join(extra)})")


def _vlan_number(vlan: str) -> int:
    if not (vlan.isdigit() and 1 <= int(vlan) <= MAX_VLAN):
        raise NvueError(400, f"{vlan!r} is not a VLAN (1-{MAX_VLAN})")
    return int(vlan)


def _base36(number: int) -> str:
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        number, digit = divmod(number, 36)
        out = digits[digit] + out
        if not number:
            return out
