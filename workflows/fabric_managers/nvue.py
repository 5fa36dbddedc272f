"""The Ethernet fabric's driver: each leaf switch's NVIDIA Cumulus Linux NVUE REST API.

A batch of ports on one switch is one NVUE revision, whatever the number of ports:
1. POST   /nvue_v1/revision                      -> {"<revision id>": {"state": "pending", ...}}
2. PATCH  /nvue_v1/?rev=<id>                      one root patch: the bridge br_default carries
          each VLAN (mapped to its VNI on an EVPN fabric), and each port is an access port of its
          VLAN: {"bridge": {"domain": {"br_default": {"vlan": {"1001": {"vni": {"5001": {}}}}}}},
                 "interface": {"swp3": {"bridge": {"domain": {"br_default": {"access": 1001}}}}}}
3. PATCH  /nvue_v1/revision/<id>                  {"state": "apply", "auto-prompt": {"ays": "ays_yes"}}
4. GET    /nvue_v1/revision/<id>                  until "applied"; "invalid", "apply_error" and the
          other failed states are a refusal, with the issues NVUE lists in its "transition".
A read is one GET /nvue_v1/interface?rev=applied. Revision ids hold slashes, escaped in the URL.

A port put on no tenant's network (Segment None) goes back to the provisioning VLAN; an isolated
one (base.ISOLATED) leaves the bridge, and reads back as "". VLANs that no
port uses any more stay in the bridge: harmless, as no port is an access port of them.

Every call goes through core/outbound.py with HTTP basic auth, to an address `check` admits.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from core import outbound
from core.topology import ETHERNET, PROVISIONING_VLAN
from workflows.fabric_managers.base import FabricRefused, FabricUnavailable, Segment

BRIDGE = "br_default"
APPLY = {"state": "apply", "auto-prompt": {"ays": "ays_yes"}}
APPLIED_STATES = ("applied", "applied_and_saved")
FAILED_STATES = ("invalid", "apply_error", "apply_fail", "ays_fail", "ignore_fail", "confirm_fail", "abandoned")
FIRST_POLL_S, LAST_POLL_S = 0.05, 1.0  # the waits between polls of an applying revision, doubling


class NvueDriver:
    """FabricDriver for Ethernet: `manager` is a leaf switch's name, `url` the template of its NVUE
    API's base URL with `{switch}` in it (bmcsim's is {BMCSIM_URL}/switches/{switch})."""

    fabric = ETHERNET

    def __init__(
        self,
        *,
        url: str,
        username: str,
        password: str,
        check: outbound.AddressCheck,
        deadline_s: float,
        max_body_bytes: int,
        provisioning_vlan: int = PROVISIONING_VLAN,
    ):
        self.url = url
        self.check = check
        self.deadline_s = deadline_s
        self.max_body_bytes = max_body_bytes
        self.provisioning_vlan = provisioning_vlan
        credential = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Accept": "application/json", "Authorization": f"Basic {credential}"}

    def read(self, manager: str, ports: Sequence[str]) -> dict[str, str]:
        """Each port's access VLAN in the applied config ("" if it is in no bridge): one call,
        GET /nvue_v1/interface?rev=applied."""
        interfaces = self._call(manager, "GET", "/interface?rev=applied", deadline=time.monotonic() + self.deadline_s)
        if not isinstance(interfaces, dict):
            raise FabricUnavailable(f"NVUE on {manager}: the interfaces are not a JSON object")
        return {port: _access_vlan(interfaces.get(port)) for port in ports}

    def apply(self, manager: str, wanted: Mapping[str, Segment | None]) -> None:
        """Put the ports on their VLANs in one revision: four calls (create, patch, apply, one
        poll) whatever the number of ports, plus a poll for every wait while it applies; all of
        them within deadline_s."""
        if not wanted:
            return
        deadline = time.monotonic() + self.deadline_s
        created = self._call(manager, "POST", "/revision", deadline=deadline)
        if not isinstance(created, dict) or len(created) != 1:
            raise FabricUnavailable(f"NVUE on {manager}: POST /revision answered no single revision")
        revision = quote(next(iter(created)), safe="")
        self._call(manager, "PATCH", f"/?rev={revision}", deadline=deadline, json_body=self._patch(wanted))
        self._call(manager, "PATCH", f"/revision/{revision}", deadline=deadline, json_body=APPLY)
        self._wait_applied(manager, revision, deadline)

    def close(self) -> None:
        """Nothing to let go: each call has a connection of its own, closed when it ends."""

    def _patch(self, wanted: Mapping[str, Segment | None]) -> dict:
        vlans: dict[str, dict] = {}
        interfaces: dict[str, dict] = {}
        for port, segment in wanted.items():
            if segment is not None and not segment.membership:  # isolated: out of the bridge
                interfaces[port] = {"bridge": {"domain": {BRIDGE: None}}}
                continue
            vlan = self.provisioning_vlan if segment is None else int(segment.membership)
            if segment is not None and segment.vni is not None:
                vlans[str(vlan)] = {"vni": {str(segment.vni): {}}}
            else:
                vlans.setdefault(str(vlan), {})
            interfaces[port] = {"bridge": {"domain": {BRIDGE: {"access": vlan}}}}
        return {"bridge": {"domain": {BRIDGE: {"vlan": vlans}}}, "interface": interfaces}

    def _wait_applied(self, manager: str, revision: str, deadline: float) -> None:
        wait = FIRST_POLL_S
        while True:
            shown = self._call(manager, "GET", f"/revision/{revision}", deadline=deadline)
            state = shown.get("state") if isinstance(shown, dict) else None
            if state in APPLIED_STATES:
                return
            if state in FAILED_STATES:
                raise FabricRefused(f"NVUE on {manager}: revision {state}: {_issues(shown)}")
            if time.monotonic() + wait >= deadline:
                raise FabricUnavailable(
                    f"NVUE on {manager}: the revision was still {state!r} at the deadline ({self.deadline_s:g} s)"
                )
            time.sleep(wait)
            wait = min(wait * 2, LAST_POLL_S)

    def _call(self, manager: str, method: str, path: str, *, deadline: float, json_body: Any = None) -> Any:
        """One call to the switch's /nvue_v1, its JSON answer; FabricUnavailable or FabricRefused."""
        where = f"NVUE on {manager}: {method} {path.partition('?')[0]}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FabricUnavailable(f"{where}: no time left within the deadline ({self.deadline_s:g} s)")
        url = self.url.format(switch=manager).rstrip("/") + "/nvue_v1" + path
        try:
            answer = outbound.request(
                method,
                url,
                check=self.check,
                deadline=remaining,
                max_body_bytes=self.max_body_bytes,
                headers=self.headers,
                json_body=json_body,
            )
        except outbound.OutboundRefused as error:
            raise FabricRefused(f"{where}: {error.reason}") from None
        except outbound.OutboundError as error:
            raise FabricUnavailable(f"{where}: {error.reason}") from None
        if 400 <= answer.status_code < 500:
            raise FabricRefused(f"{where}: {answer.status_code} {_detail(answer)}")
        if answer.status_code >= 300:
            raise FabricUnavailable(f"{where}: {answer.status_code} {_detail(answer)}")
        try:
            return answer.json()
        except ValueError:
            raise FabricUnavailable(f"{where}: the answer is not JSON") from None


def _access_vlan(interface: Any) -> str:
    try:
        access = interface["bridge"]["domain"][BRIDGE]["access"]
    except (KeyError, TypeError):
        return ""
    return str(access) if isinstance(access, int) else ""


def _issues(shown: dict) -> str:
    """The messages of the issues NVUE lists in a revision's transition, or its progress."""
    transition = shown.get("transition")
    transition = transition if isinstance(transition, dict) else {}
    issues = transition.get("issue")
    issues = issues if isinstance(issues, dict) else {}
    messages = [str(issue.get("message", "")) for issue in issues.values() if isinstance(issue, dict)]
    return "; ".join(message for message in messages if message) or str(transition.get("progress") or "no issue listed")


def _detail(answer: outbound.Answer) -> str:
    """NVUE's words for a refusal: its "detail" or "message", else the start of the body."""
    try:
        body = answer.json()
    except ValueError:
        return repr(answer.text[:200])
    if isinstance(body, dict):
        for key in ("detail", "message", "title"):
            if body.get(key):
                return str(body[key])[:500]
    return repr(answer.text[:200])
