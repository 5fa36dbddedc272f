"""The InfiniBand driver: NVIDIA UFM Enterprise's REST API, one UFM per InfiniBand fabric.

A tenant's network is a P_Key; a port is an HCA port GUID, made a full member of the tenant's
P_Key (index0 false, IP over InfiniBand on) while the node serves the tenant. Every GUID stays a
limited member of the default partition 0x7fff, which UFM's API does not change: limited members
cannot reach one another, so a node outside every tenant P_Key reaches no one.

Calls, all with HTTP basic auth, each through core.outbound (the allow-list, a share of the
driver's deadline, the body cap):
- read: GET /ufmRest/resources/pkeys?guids_data=true, one call per fabric however many ports;
- apply: that read, then one call per partition touched: POST /ufmRest/actions/remove_guids_from_pkey
  {"pkey", "guids"} for the GUIDs leaving a partition (or DELETE /ufmRest/resources/pkeys/<pkey>
  when they are all of its members), then POST /ufmRest/resources/pkeys {"pkey", "guids",
  "membership": "full", "index0": false, "ip_over_ib": true} for those joining one. Removals go
  first, so a GUID moved between tenants is never on both. UFM answers once the change is made:
  there is nothing to poll.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from core import outbound
from core.topology import DEFAULT_PKEY, INFINIBAND
from workflows.fabric_managers.base import FabricRefused, FabricUnavailable, Segment

PKEYS = "/ufmRest/resources/pkeys"
REMOVE_GUIDS = "/ufmRest/actions/remove_guids_from_pkey"
FULL = "full"


def pkey_text(pkey: int) -> str:
    return f"0x{pkey:04x}"


def _guid(text: str) -> str:
    """A GUID as UFM stores it: 16 lowercase hex digits, no 0x."""
    text = text.lower()
    return text[2:] if text.startswith("0x") else text


class UfmDriver:
    fabric = INFINIBAND

    def __init__(
        self,
        *,
        url: str,
        username: str,
        password: str,
        check: outbound.AddressCheck,
        deadline_s: float,
        max_body_bytes: int,
    ):
        self.url = url  # a template: "{fabric}" is the fabric's name
        self.check = check
        self.deadline_s = deadline_s
        self.max_body_bytes = max_body_bytes
        credentials = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Accept": "application/json", "Authorization": f"Basic {credentials}"}

    def read(self, manager: str, ports: Sequence[str]) -> dict[str, str]:
        """Each GUID's full-member P_Keys outside the default partition, comma-joined ("" none),
        and the default partition's too if it is a full member of it (which no one should be).
        One call."""
        members = self._members(manager, time.monotonic() + self.deadline_s)
        return {port: _membership(members.get(_guid(port), {})) for port in ports}

    def apply(self, manager: str, wanted: Mapping[str, Segment | None]) -> None:
        """Make each GUID a full member of its segment's P_Key and of no other tenant partition
        (None: of none). One read, then one call per partition touched. FabricRefused, once
        every other change is made, for a GUID that is a full member of the default partition:
        UFM's API cannot change that one, an operator must."""
        ends = time.monotonic() + self.deadline_s
        members = self._members(manager, ends)
        joining: dict[int, list[str]] = {}
        leaving: dict[int, list[str]] = {}
        stuck = []
        for port, segment in wanted.items():
            guid = _guid(port)
            target = _parse_pkey(segment.membership) if segment is not None else None
            now_in = members.get(guid, {})
            if target is not None and now_in.get(target) != FULL:
                joining.setdefault(target, []).append(guid)
            for pkey in now_in:
                if pkey not in (target, DEFAULT_PKEY):
                    leaving.setdefault(pkey, []).append(guid)
            if now_in.get(DEFAULT_PKEY) == FULL:
                stuck.append(guid)
        for pkey, guids in sorted(leaving.items()):
            partition = {guid for guid, held in members.items() if pkey in held}
            if pkey not in joining and partition <= set(guids):
                self._call("DELETE", manager, f"{PKEYS}/{pkey_text(pkey)}", ends)
            else:
                self._call("POST", manager, REMOVE_GUIDS, ends, {"pkey": pkey_text(pkey), "guids": guids})
        for pkey, guids in sorted(joining.items()):
            body = {"pkey": pkey_text(pkey), "guids": guids, "membership": FULL, "index0": False, "ip_over_ib": True}
            self._call("POST", manager, PKEYS, ends, body)
        if stuck:
            raise FabricRefused(
                f"UFM of {manager}: {len(stuck)} GUID(s) ({', '.join(stuck[:4])}"
                f"{', ...' if len(stuck) > 4 else ''}) full member(s) of the default partition "
                f"{pkey_text(DEFAULT_PKEY)}, which its REST API cannot change"
            )

    def close(self) -> None:
        """Nothing to let go: each call has a connection of its own."""

    def _members(self, manager: str, ends: float) -> dict[str, dict[int, str]]:
        """GUID -> {P_Key: "full" or "limited"} for every partition of the fabric."""
        listing = self._call("GET", manager, f"{PKEYS}?guids_data=true", ends)
        members: dict[str, dict[int, str]] = {}
        try:
            for pkey, partition in listing.items():
                for member in partition.get("guids") or []:
                    members.setdefault(_guid(member["guid"]), {})[int(pkey, 16) & DEFAULT_PKEY] = member["membership"]
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise FabricUnavailable(f"UFM of {manager}: partitions in an unexpected shape ({error!r})") from None
        return members

    def _call(self, method: str, manager: str, path: str, ends: float, body: dict | None = None) -> Any:
        """One request within what is left of the deadline; its JSON answer, or the error that says why not."""
        url = self.url.replace("{fabric}", quote(manager, safe="")).rstrip("/") + path
        who = f"UFM of {manager}"
        left = ends - time.monotonic()
        if left <= 0:
            raise FabricUnavailable(f"{who}: no answer within the deadline ({self.deadline_s:g} s)")
        try:
            answer = outbound.request(
                method,
                url,
                check=self.check,
                deadline=left,
                max_body_bytes=self.max_body_bytes,
                headers=self.headers,
                json_body=body,
            )
        except outbound.OutboundError as error:
            raise FabricUnavailable(f"{who}: {method} {path}: {error.reason}") from None
        if 400 <= answer.status_code < 500:
            raise FabricRefused(f"{who}: {method} {path} refused: {answer.status_code} {_words(answer)}")
        if not 200 <= answer.status_code < 300:
            raise FabricUnavailable(f"{who}: {method} {path} answered {answer.status_code} {_words(answer)}")
        if method != "GET":
            return None
        try:
            return answer.json()
        except ValueError:
            raise FabricUnavailable(f"{who}: {method} {path} answered no JSON: {answer.text[:200]!r}") from None


def _parse_pkey(membership: str) -> int:
    try:
        pkey = int(membership, 16)
    except ValueError:
        pkey = 0
    if not 0 < pkey < DEFAULT_PKEY:
        raise FabricRefused(f"{membership!r} is not a P_Key a tenant may have (0x0001 to 0x7ffe)")
    return pkey


def _membership(held: Mapping[int, str]) -> str:
    return ",".join(pkey_text(pkey) for pkey, kind in sorted(held.items()) if kind == FULL)


def _words(answer: outbound.Answer) -> str:
    """What the manager said: its JSON "error" (or "detail"), else the start of its body."""
    try:
        said = answer.json()
        if isinstance(said, dict) and (said.get("error") or said.get("detail")):
            return str(said.get("error") or said.get("detail"))
    except ValueError:
        pass
    return repr(answer.text[:200])
