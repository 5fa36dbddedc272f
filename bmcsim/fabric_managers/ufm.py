"""An InfiniBand fabric's UFM, as bmcsim keeps it: partitions (P_Keys) and their member GUIDs, each
full or limited. The HTTP side is bmcsim/fabric_apis/ufm.py.

It starts as UFM does once partitions.conf has no rule for the default partition: the default
partition 0x7fff ("management") with every HCA port GUID of the fabric a limited member, and no
other. UFM's REST API changes every partition but that one (its P_Keys run from 0x1 to 0x7ffe);
a GUID made a full member of the default partition by hand stays one until fixed by hand.

Pure: the API's checks and answers as values and UfmError; no aiohttp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.topology import DEFAULT_PKEY

FULL, LIMITED = "full", "limited"
MEMBERSHIPS = (FULL, LIMITED)
DEFAULT_PARTITION_NAME = "management"
GUID = re.compile(r"(?:0x)?([0-9a-f]{16})")  # UFM's GUIDs: 16 hex digits, "0x" allowed before
PKEY = re.compile(r"0x[0-9a-f]{1,4}")


class UfmError(Exception):
    """A request UFM refuses: `status` is the HTTP status it answers with, the message its words."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def pkey_text(pkey: int) -> str:
    """As UFM lists a P_Key: "0x" and four hex digits."""
    return f"0x{pkey:04x}"


def parse_pkey(value: object) -> int:
    """A P_Key as the API takes it ("0x0a12", any case, 1 to 4 digits), membership bit off; UfmError 400 if not one."""
    text = value.lower() if isinstance(value, str) else ""
    if not PKEY.fullmatch(text):
        raise UfmError(400, f"invalid pkey {value!r}: a hexadecimal string such as '0x0a12'")
    return int(text, 16) & DEFAULT_PKEY


def changeable_pkey(value: object) -> int:
    """A P_Key the API may change: between 0x0 and 0x7fff, both excluded."""
    pkey = parse_pkey(value)
    if not 0 < pkey < DEFAULT_PKEY:
        raise UfmError(
            400, f"pkey {pkey_text(pkey)} cannot be changed: a pkey must be between 0x0 and 0x7fff exclusive"
        )
    return pkey


def parse_guids(value: object) -> list[str]:
    """A non-empty list of port GUIDs, as UFM stores them (16 lowercase hex digits); UfmError 400 if not."""
    if not isinstance(value, list) or not value:
        raise UfmError(400, "guids must be a non-empty list of port GUIDs")
    guids = []
    for item in value:
        found = GUID.fullmatch(item.lower()) if isinstance(item, str) else None
        if found is None:
            raise UfmError(400, f"invalid guid {item!r}: a hexadecimal string of 16 digits")
        guids.append(found.group(1))
    return list(dict.fromkeys(guids))


@dataclass
class Member:
    membership: str  # FULL or LIMITED
    index0: bool = False


@dataclass
class Partition:
    name: str
    ip_over_ib: bool = True
    guids: dict[str, Member] = field(default_factory=dict)

    def view(self, guids_data: bool) -> dict:
        """The partition as UFM answers it; with `guids_data`, its members too."""
        shown: dict = {"partition": self.name, "ip_over_ib": self.ip_over_ib}
        if guids_data:
            shown["guids"] = [
                {"guid": guid, "membership": member.membership, "index0": member.index0}
                for guid, member in self.guids.items()
            ]
        return shown


class UfmManager:
    def __init__(self, name: str, guids: tuple[str, ...]):
        self.name = name
        self.guids = guids
        self.partitions: dict[int, Partition] = {
            DEFAULT_PKEY: Partition(DEFAULT_PARTITION_NAME, True, {guid: Member(LIMITED) for guid in guids})
        }

    # -- persistence --------------------------------------------------------------------------

    def dump(self) -> dict:
        return {
            "partitions": {
                pkey_text(pkey): {
                    "partition": partition.name,
                    "ip_over_ib": partition.ip_over_ib,
                    "guids": {guid: [member.membership, member.index0] for guid, member in partition.guids.items()},
                }
                for pkey, partition in self.partitions.items()
            }
        }

    def restore(self, data: dict) -> None:
        self.partitions = {
            int(pkey, 16): Partition(
                shown["partition"],
                shown["ip_over_ib"],
                {guid: Member(membership, index0) for guid, (membership, index0) in shown["guids"].items()},
            )
            for pkey, shown in data["partitions"].items()
        }

    # -- what the rest of bmcsim asks -----------------------------------------------------------

    def memberships(self, guid: str) -> dict[int, str]:
        """P_Key -> "full" or "limited" for every partition the GUID is in."""
        return {
            pkey: partition.guids[guid].membership
            for pkey, partition in self.partitions.items()
            if guid in partition.guids
        }

    def full_pkeys(self, guid: str) -> str:
        """The P_Keys the GUID is a full member of, as the control plane writes a membership ("" none)."""
        return ",".join(pkey_text(pkey) for pkey, kind in sorted(self.memberships(guid).items()) if kind == FULL)

    def drift(self, guids: tuple[str, ...], segment: str | None) -> dict:
        """Someone added the node's GUIDs by hand as full members of P_Key `segment` ("0x...."), or
        (None) of another partition that has full members, else a partition of its own. Returns
        {"port", "from", "to"}: the GUIDs (comma-joined), and the first GUID's full-member P_Keys
        before and after. The GUIDs stay in the partitions they were in. `segment` may be the
        default partition's: what UFM's API cannot undo."""
        before = self.full_pkeys(guids[0])
        if segment is not None:
            pkey = parse_pkey(segment)
        else:
            others = [
                pkey
                for pkey, partition in sorted(self.partitions.items())
                if pkey != DEFAULT_PKEY
                and not set(guids) & set(partition.guids)
                and any(member.membership == FULL for member in partition.guids.values())
            ]
            pkey = others[0] if others else self._unused_pkey()
        partition = self.partitions.setdefault(pkey, Partition(f"by_hand_{pkey_text(pkey)}"))
        for guid in guids:
            partition.guids[guid] = Member(FULL)
        return {"port": ",".join(guids), "from": before, "to": self.full_pkeys(guids[0])}

    def _unused_pkey(self) -> int:
        return next(pkey for pkey in range(0x7FFE, 0, -1) if pkey not in self.partitions)

    # -- the REST API's operations --------------------------------------------------------------

    def list_view(self, guids_data: bool) -> dict:
        """GET /ufmRest/resources/pkeys: every partition by P_Key."""
        return {pkey_text(pkey): partition.view(guids_data) for pkey, partition in sorted(self.partitions.items())}

    def item_view(self, pkey_value: str, guids_data: bool) -> dict:
        """GET /ufmRest/resources/pkeys/<pkey>: the partition, or {} if there is none (as UFM answers)."""
        partition = self.partitions.get(parse_pkey(pkey_value))
        return partition.view(guids_data) if partition else {}

    def add_guids(self, body: object) -> None:
        """POST /ufmRest/resources/pkeys: the GUIDs join the partition (created if new, named
        api_pkey_0x... as UFM names it) with the membership and index0 given; a GUID already in
        it takes them."""
        if not isinstance(body, dict):
            raise UfmError(400, "the request body must be a JSON object")
        pkey = changeable_pkey(body.get("pkey"))
        guids = parse_guids(body.get("guids"))
        membership = body.get("membership", FULL)
        index0 = body.get("index0", False)
        ip_over_ib = body.get("ip_over_ib", True)
        if membership not in MEMBERSHIPS:
            raise UfmError(400, f"invalid membership {membership!r}: 'full' or 'limited'")
        if not isinstance(index0, bool) or not isinstance(ip_over_ib, bool):
            raise UfmError(400, "index0 and ip_over_ib must be true or false")
        partition = self.partitions.setdefault(pkey, Partition(f"api_pkey_{pkey_text(pkey)}", ip_over_ib))
        for guid in guids:
            partition.guids[guid] = Member(membership, index0)

    def remove_guids(self, body: object) -> None:
        """POST /ufmRest/actions/remove_guids_from_pkey: the GUIDs leave the partition (a GUID not in it: nothing)."""
        if not isinstance(body, dict):
            raise UfmError(400, "the request body must be a JSON object")
        pkey = changeable_pkey(body.get("pkey"))
        guids = parse_guids(body.get("guids"))
        partition = self._existing(pkey)
        for guid in guids:
            partition.guids.pop(guid, None)

    def delete(self, pkey_value: str) -> None:
        """DELETE /ufmRest/resources/pkeys/<pkey>: the partition and its memberships go."""
        pkey = changeable_pkey(pkey_value)
        self._existing(pkey)
        del self.partitions[pkey]

    def _existing(self, pkey: int) -> Partition:
        partition = self.partitions.get(pkey)
        if partition is None:
            raise UfmError(404, f"pkey {pkey_text(pkey)} does not exist")
        return partition
