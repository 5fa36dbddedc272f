"""An NVLink domain's NMX-M, as bmcsim keeps it: the domain's GPUs, its partitions of them (a GPU
in one at most) and the operations that create, change and delete partitions. The HTTP side is
bmcsim/fabric_apis/nmx.py; the shapes follow NMX-M's `/nmx/v1` API (GPU, Partition and Operation
objects, field names as NMX-M spells them).

A change is checked when it is asked for (a name in use, a GPU unknown or in another partition:
refused at once, `NmxRefused`), then queued as an operation that takes APPLY_S simulated seconds
and is applied by `settle` once due, checked again then: the operation ends `completed`, or
`failed` with NMX-M's Result (`Error`, `Details`). Partitions are ID-based: members are the GPUs'
`ID`s. A GPU's UUID, which NMX-M does not report, is its `Description` here (an assumption: the
control plane needs it to find the GPU).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from core.topology import GPU_MODEL

APPLY_S = 2.0  # how long an operation takes, in simulated seconds (times the time scale)
KEPT_OPERATIONS = 256  # finished operations listed, the newest
FIRST_PARTITION_ID, LAST_PARTITION_ID = 1, 32765  # NMX-C reserves 32766 for its default partition
MAX_NAME = 255  # NMX-C: a partition's name is unique in the domain, at most 255 ASCII characters
PENDING, COMPLETED, FAILED = "pending", "completed", "failed"
API = "/nmx/v1"


class NmxRefused(Exception):
    """A change NMX-M refuses when asked (400, 404, 409): `status` and the words it answers with."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _object_id(*parts: str) -> str:
    """An ID as NMX-M writes them: 24 hex digits."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:24]


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class NmxManager:
    def __init__(self, name: str, gpus: tuple[str, ...], hosts: Mapping[str, Sequence[str]] | None = None):
        """`gpus`: the domain's GPUs by UUID; `hosts`: each node's GPUs, in slot order (for their
        LocationInfo; without it the GPUs have none)."""
        self.name = name
        self.gpus = gpus
        self.domain_uuid = _object_id("nmx-domain", name)
        self.gpu_ids = {uuid: _object_id("nmx-gpu", name, uuid) for uuid in gpus}
        self.uuids = {gpu_id: uuid for uuid, gpu_id in self.gpu_ids.items()}
        self._locations: dict[str, dict] = {}
        for slot, host_gpus in enumerate((hosts or {}).values(), start=1):
            for device, uuid in enumerate(host_gpus, start=1):
                self._locations[uuid] = {"slot": slot, "device": device}
        self.partitions: dict[str, dict] = {}  # ID -> Partition, as NMX-M answers it
        self.operations: dict[str, dict] = {}  # ID -> Operation, as NMX-M answers it
        self._queued: dict[str, dict] = {}  # operation ID -> {"due", "change", "failure"}, oldest first
        self._serial = 0  # makes each new ID unique

    # -- persistence ------------------------------------------------------------------------

    def dump(self) -> dict:
        return {
            "partitions": self.partitions,
            "operations": self.operations,
            "queued": self._queued,
            "serial": self._serial,
        }

    def restore(self, data: dict) -> None:
        self.partitions = data.get("partitions", {})
        self.operations = data.get("operations", {})
        self._queued = data.get("queued", {})
        self._serial = data.get("serial", 0)

    # -- reads ------------------------------------------------------------------------------

    def partition_of(self, gpu: str) -> str | None:
        """The name of the partition that holds the GPU (by UUID), None if none."""
        gpu_id = self.gpu_ids.get(gpu)
        return next((p["Name"] for p in self.partitions.values() if gpu_id in p["Members"]), None)

    def gpu_listing(self) -> list[dict]:
        holders = self._holders()  # once for the listing, not a walk of every partition per GPU
        return [self._gpu(uuid, holders) for uuid in self.gpus]

    def gpu(self, gpu_id: str) -> dict | None:
        uuid = self.uuids.get(gpu_id)
        return None if uuid is None else self._gpu(uuid, self._holders())

    def _holders(self) -> dict[str, dict]:
        """Each GPU ID in a partition, with the (first) partition that holds it."""
        holders: dict[str, dict] = {}
        for partition in self.partitions.values():
            for gpu_id in partition["Members"]:
                holders.setdefault(gpu_id, partition)
        return holders

    def _gpu(self, uuid: str, holders: Mapping[str, dict]) -> dict:
        gpu_id = self.gpu_ids[uuid]
        holder = holders.get(gpu_id)
        gpu: dict = {
            "ID": gpu_id,
            "Name": GPU_MODEL,
            "Description": uuid,
            "DomainUUID": self.domain_uuid,
            "DeviceUID": int(gpu_id[:15], 16),
            "Health": "HEALTHY",
        }
        location = self._locations.get(uuid)
        if location is not None:
            gpu["DeviceID"] = location["device"]
            gpu["LocationInfo"] = {
                "ChassisID": 1,
                "ChassisSerialNumber": f"{self.name}-chassis",
                "SlotID": location["slot"],
                "TrayIndex": location["slot"] - 1,
                "HostID": 1,
            }
        if holder is not None:
            gpu["PartitionID"] = holder["PartitionID"]
        return gpu

    # -- changes, as the API asks for them ------------------------------------------------------

    def create(self, body: object, now: float, delay: float, failure: str | None) -> dict:
        """POST /partitions: queue the partition's creation; the Operation. `failure`: the
        operation fails with these words (the fault fabric_apply_fails)."""
        if not isinstance(body, dict):
            raise NmxRefused(400, "the body must be a JSON object with 'Name' and 'Members'")
        name = body.get("Name")
        if (
            not isinstance(name, str)
            or not name
            or len(name) > MAX_NAME
            or not name.isascii()
            or not name.isprintable()
        ):
            raise NmxRefused(400, f"'Name' must be 1 to {MAX_NAME} printable ASCII characters")
        queued_names = {q["change"].get("name") for q in self._queued.values()}
        if name in queued_names or any(p["Name"] == name for p in self.partitions.values()):
            raise NmxRefused(409, f"a partition named {name!r} exists in domain {self.name}")
        members = self._members(body, partition_id=None)
        partition_id = _object_id("nmx-partition", self.name, str(self._next_serial()))
        change = {"action": "create", "partition": partition_id, "name": name, "members": members}
        return self._queue(change, "post", f"{API}/partitions", body, now, delay, failure)

    def update(self, partition_id: str, body: object, now: float, delay: float, failure: str | None) -> dict:
        """PUT /partitions/{id}: queue the new member list (all of them: NMX-M adds and removes)."""
        self._existing(partition_id)
        if not isinstance(body, dict):
            raise NmxRefused(400, "the body must be a JSON object with 'Members'")
        members = self._members(body, partition_id=partition_id)
        change = {"action": "update", "partition": partition_id, "members": members}
        return self._queue(change, "put", f"{API}/partitions/{partition_id}", body, now, delay, failure)

    def delete(self, partition_id: str, now: float, delay: float, failure: str | None) -> dict:
        """DELETE /partitions/{id}: queue the partition's removal; its GPUs are then in none."""
        self._existing(partition_id)
        change = {"action": "delete", "partition": partition_id}
        return self._queue(change, "delete", f"{API}/partitions/{partition_id}", None, now, delay, failure)

    def _existing(self, partition_id: str) -> dict:
        partition = self.partitions.get(partition_id)
        if partition is None:
            raise NmxRefused(404, f"no partition {partition_id} in domain {self.name}")
        return partition

    def _members(self, body: dict, partition_id: str | None) -> list[str]:
        """The body's ID-based `Members`, each a GPU of this domain in no other partition."""
        members = body.get("Members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise NmxRefused(400, "'Members' must be a list of GPU IDs (bmcsim simulates ID-based partitions only)")
        if len(set(members)) != len(members):
            raise NmxRefused(400, "'Members' lists a GPU twice")
        unknown = [m for m in members if m not in self.uuids]
        if unknown:
            raise NmxRefused(400, f"no GPU {', '.join(unknown)} in domain {self.name}")
        taken = self._held_elsewhere(members, partition_id)
        if taken:
            raise NmxRefused(409, taken)
        return members

    def _held_elsewhere(self, members: list[str], partition_id: str | None) -> str:
        """Why some of `members` cannot join partition `partition_id`: '' if they can."""
        wanted = set(members)
        held = [
            f"GPU {gpu_id} is a member of partition {p['Name']!r}"
            for pid, p in self.partitions.items()
            if pid != partition_id
            for gpu_id in p["Members"]
            if gpu_id in wanted
        ]
        return "; ".join(held)

    def _next_serial(self) -> int:
        self._serial += 1
        return self._serial

    def _queue(
        self, change: dict, method: str, uri: str, body: object, now: float, delay: float, failure: str | None
    ) -> dict:
        operation_id = _object_id("nmx-operation", self.name, str(self._next_serial()))
        self.operations[operation_id] = {
            "ID": operation_id,
            "CreatedAt": _stamp(now),
            "UpdatedAt": _stamp(now),
            "Status": PENDING,
            "Percentage": 0,
            "CurrentStep": "queued",
            "Request": {"Method": method, "URI": uri, "Body": body, "Cancellable": False},
        }
        self._queued[operation_id] = {"due": now + delay, "change": change, "failure": failure}
        return self.operations[operation_id]

    # -- time passing -----------------------------------------------------------------------------

    def settle(self, now: float) -> bool:
        """Apply every queued operation due by `now`, oldest first; True if any was."""
        due = [operation_id for operation_id, queued in self._queued.items() if queued["due"] <= now]
        for operation_id in due:
            queued = self._queued.pop(operation_id)
            error = ("INTERNAL_ERROR", queued["failure"]) if queued["failure"] else self._apply(queued["change"], now)
            operation = self.operations[operation_id]
            operation.update(UpdatedAt=_stamp(now), Percentage=100, CurrentStep="done")
            if error is None:
                operation["Status"] = COMPLETED
                partition = self.partitions.get(queued["change"]["partition"])
                operation["Result"] = {"Data": partition, "Details": "the partition change is applied"}
            else:
                operation["Status"] = FAILED
                operation["Result"] = {"Error": error[0], "Details": error[1]}
        finished = [i for i in self.operations if i not in self._queued]
        for operation_id in finished[:-KEPT_OPERATIONS]:
            del self.operations[operation_id]
        return bool(due)

    def _apply(self, change: dict, now: float) -> tuple[str, str] | None:
        """Carry a change out, checked again against what holds now; (Error, Details) if it cannot be."""
        action, partition_id = change["action"], change["partition"]
        if action != "create" and partition_id not in self.partitions:
            return "NOT_FOUND", f"partition {partition_id} no longer exists"
        if action == "delete":
            del self.partitions[partition_id]
            return None
        taken = self._held_elsewhere(change["members"], partition_id)
        if taken:
            return "CONFLICT", taken
        if action == "update":
            self.partitions[partition_id].update(Members=change["members"], UpdatedAt=_stamp(now))
            return None
        if any(p["Name"] == change["name"] for p in self.partitions.values()):
            return "CONFLICT", f"a partition named {change['name']!r} exists in domain {self.name}"
        self.partitions[partition_id] = self._partition(partition_id, change["name"], change["members"], now)
        return None

    def _partition(self, partition_id: str, name: str, members: list[str], now: float) -> dict:
        used = {p["PartitionID"] for p in self.partitions.values()}
        number = next(n for n in range(FIRST_PARTITION_ID, LAST_PARTITION_ID + 1) if n not in used)
        return {
            "ID": partition_id,
            "PartitionID": number,
            "Name": name,
            "Type": "ID_BASED",
            "Health": "HEALTHY",
            "Members": members,
            "CreatedAt": _stamp(now),
            "UpdatedAt": _stamp(now),
        }

    # -- by hand ----------------------------------------------------------------------------------

    def drift(self, gpus: tuple[str, ...], segment: str | None, now: float | None = None) -> dict:
        """Someone moved the node's GPUs by hand into partition `segment` (its name), or (None)
        another partition of the domain, else a partition of their own. Returns {"port", "from", "to"}:
        the GPUs' UUIDs and partition names, comma-joined where several."""
        now = time.time() if now is None else now
        names = [self.partition_of(gpu) or "" for gpu in gpus]
        moved = [self.gpu_ids[gpu] for gpu in gpus]
        if segment is None:
            others = sorted(p["Name"] for p in self.partitions.values() if p["Name"] not in names)
            segment = others[0] if others else f"by-hand-{self._next_serial()}"
        for partition in self.partitions.values():
            partition["Members"] = [m for m in partition["Members"] if m not in moved]
        target = next((p for p in self.partitions.values() if p["Name"] == segment), None)
        if target is None:
            partition_id = _object_id("nmx-partition", self.name, str(self._next_serial()))
            target = self.partitions[partition_id] = self._partition(partition_id, segment, [], now)
        target.update(Members=[*target["Members"], *moved], UpdatedAt=_stamp(now))
        return {"port": ",".join(gpus), "from": _joined(names), "to": segment}


def _joined(names: list[str]) -> str:
    return names[0] if len(set(names)) == 1 else ",".join(names)
