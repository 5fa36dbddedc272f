"""The NVLink driver: partitions of an NVLink domain's GPUs through NVIDIA NMX-M's REST API
(`/nmx/v1`), one NMX-M per domain at the URL template's `{domain}`, HTTP basic auth.

A port is a GPU by its UUID; its membership is the name of the partition that holds it ('' for
none). NMX-M names GPUs by its own `ID`s, so each call starts with GET /nmx/v1/gpus to map UUIDs
to IDs (the UUID is the GPU's `Description`: see bmcsim/fabric_managers/nmx.py) and
GET /nmx/v1/partitions for who holds what. A change is an operation (202, `operationId`), polled
at GET /nmx/v1/operations/{id} until `completed`, or `failed` with NMX-M's `Result`.

A GPU belongs to one partition at most, and NMX-M refuses a GPU that another partition holds, so
`apply` works in two rounds: first every partition that loses GPUs (PUT with the members it
keeps, DELETE once it keeps none), polled until done; then every partition that gains GPUs (PUT
with all its members, POST to create it). Calls grow with the partitions touched, never with the
GPUs: `read` makes 2 calls; `apply` 2 plus, for each operation, 1 to ask and 1 or more to poll
(one operation per partition touched, two for a partition that both loses and gains).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any

from core import outbound
from core.topology import NVLINK
from workflows.fabric_managers.base import FabricRefused, FabricUnavailable, Segment

API = "/nmx/v1"
FIRST_POLL_S, MAX_POLL_S = 0.02, 0.5  # between two looks at an operation, doubling
DONE, FAILED, CANCELLED = "completed", "failed", "cancelled"


class NmxDriver:
    fabric = NVLINK

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
        self.url = url
        self.check = check
        self.deadline_s = deadline_s
        self.max_body_bytes = max_body_bytes
        credentials = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Accept": "application/json", "Authorization": f"Basic {credentials}"}

    def close(self) -> None:
        """Nothing to let go: each call has a connection of its own."""

    def read(self, manager: str, ports: Sequence[str]) -> dict[str, str]:
        """Each GPU's partition name ('' for none): 2 calls, whatever the number of GPUs."""
        call = _Calls(self, manager)
        ids = call.gpu_ids(ports)
        holder = {gpu_id: p["Name"] for p in call.partitions() for gpu_id in p["Members"]}
        return {port: holder.get(ids[port], "") for port in ports}

    def apply(self, manager: str, wanted: Mapping[str, Segment | None]) -> None:
        """Put each GPU in its segment's partition (created if missing), or (None) in none; returns
        once NMX-M has completed every operation. Calls: see the module."""
        call = _Calls(self, manager)
        ids = call.gpu_ids(list(wanted))
        partitions = call.partitions()
        by_name = {p["Name"]: p for p in partitions}
        holder = {gpu_id: p["Name"] for p in partitions for gpu_id in p["Members"]}
        target = {ids[gpu]: (segment.membership if segment else "") for gpu, segment in wanted.items()}
        moving = {gpu_id: name for gpu_id, name in target.items() if holder.get(gpu_id, "") != name}
        if not moving:
            return
        losing = {holder[g] for g in moving if g in holder}
        gaining = {name for name in moving.values() if name}
        shrinks = []
        for name in sorted(losing):
            partition = by_name[name]
            kept = [g for g in partition["Members"] if g not in moving]
            if kept or name in gaining:
                shrinks.append(call.change("PUT", f"{API}/partitions/{partition['ID']}", {"Members": kept}))
            else:
                shrinks.append(call.change("DELETE", f"{API}/partitions/{partition['ID']}"))
        call.wait(shrinks)
        grows = []
        for name in sorted(gaining):
            joining = [g for g, to in moving.items() if to == name]
            if name in by_name:
                kept = [g for g in by_name[name]["Members"] if g not in moving]
                body = {"Members": kept + joining}
                grows.append(call.change("PUT", f"{API}/partitions/{by_name[name]['ID']}", body))
            else:
                grows.append(call.change("POST", f"{API}/partitions", {"Name": name, "Members": joining}))
        call.wait(grows)


class _Calls:
    """The calls of one `read` or `apply` on one NMX-M, all within one deadline."""

    def __init__(self, driver: NmxDriver, manager: str):
        self.driver = driver
        self.manager = manager
        self.base = driver.url.replace("{domain}", manager).rstrip("/")
        self.until = time.monotonic() + driver.deadline_s

    def gpu_ids(self, uuids: Sequence[str]) -> dict[str, str]:
        """NMX-M's ID of each GPU, by UUID; FabricRefused naming those NMX-M does not list."""
        listed = self.request("GET", f"{API}/gpus")
        known = {gpu.get("Description"): gpu.get("ID") for gpu in self.objects(listed, "GPU")}
        missing = [uuid for uuid in uuids if not known.get(uuid)]
        if missing:
            raise FabricRefused(f"NMX-M {self.manager}: lists no GPU {', '.join(missing)}")
        return {uuid: str(known[uuid]) for uuid in uuids}

    def partitions(self) -> list[dict]:
        partitions = self.objects(self.request("GET", f"{API}/partitions"), "partition")
        for p in partitions:
            if not isinstance(p.get("Name"), str) or not isinstance(p.get("ID"), str):
                raise FabricUnavailable(f"NMX-M {self.manager}: a partition without Name or ID")
            if not isinstance(p.get("Members"), list):  # a partition of no GPU, or location-based
                p["Members"] = []
        return partitions

    def change(self, method: str, path: str, body: dict | None = None) -> str:
        """Ask for a change; the ID of the operation NMX-M answers with."""
        answer = self.request(method, path, body)
        operation_id = answer.get("operationId") if isinstance(answer, dict) else None
        if not isinstance(operation_id, str) or not operation_id:
            raise FabricUnavailable(f"NMX-M {self.manager}: {method} {path} answered no operationId")
        return operation_id

    def wait(self, operation_ids: list[str]) -> None:
        """Poll each operation until it has ended; FabricRefused with NMX-M's words if one failed,
        FabricUnavailable if one is still running at the deadline."""
        pause = FIRST_POLL_S
        for operation_id in operation_ids:
            while True:
                operation = self.request("GET", f"{API}/operations/{operation_id}")
                status = operation.get("Status") if isinstance(operation, dict) else None
                if status == DONE:
                    break
                if status in (FAILED, CANCELLED):
                    result = operation.get("Result") or {}
                    words = (
                        f"{result.get('Error', '')}: {result.get('Details', '')}" if isinstance(result, dict) else ""
                    )
                    raise FabricRefused(
                        f"NMX-M {self.manager}: operation {operation_id} {status}: {words}".rstrip(": ")
                    )
                if time.monotonic() + pause >= self.until:
                    late = f"still {status} after {self.driver.deadline_s:g} s"
                    raise FabricUnavailable(f"NMX-M {self.manager}: operation {operation_id} {late}")
                time.sleep(pause)
                pause = min(pause * 2, MAX_POLL_S)

    def objects(self, answer: Any, kind: str) -> list[dict]:
        if not isinstance(answer, list) or not all(isinstance(item, dict) for item in answer):
            raise FabricUnavailable(f"NMX-M {self.manager}: the {kind} listing is not a list of objects")
        return answer

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        """One call; its answer's JSON. FabricUnavailable: no answer, 5xx or no JSON; FabricRefused: 4xx."""
        left = self.until - time.monotonic()
        if left <= 0:
            raise FabricUnavailable(f"NMX-M {self.manager}: no answer within {self.driver.deadline_s:g} s")
        try:
            answer = outbound.request(
                method,
                self.base + path,
                check=self.driver.check,
                deadline=left,
                max_body_bytes=self.driver.max_body_bytes,
                headers=self.driver.headers,
                json_body=body,
            )
        except outbound.OutboundError as error:
            raise FabricUnavailable(f"NMX-M {self.manager}: {method} {path}: {error.reason}") from None
        if 400 <= answer.status_code < 500:
            raise FabricRefused(f"NMX-M {self.manager}: {method} {path}: {answer.status_code} {_words(answer)}")
        if not 200 <= answer.status_code < 300:
            raise FabricUnavailable(f"NMX-M {self.manager}: {method} {path}: {answer.status_code} {_words(answer)}")
        try:
            return answer.json()
        except ValueError:
            raise FabricUnavailable(f"NMX-M {self.manager}: {method} {path}: an answer that is not JSON") from None


def _words(answer: outbound.Answer) -> str:
    """What the manager said: its JSON error's message, else the start of its body."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:200]
    if isinstance(body, dict):
        for key in ("detail", "message", "error", "Details"):
            if isinstance(body.get(key), str):
                return body[key]
    return answer.text[:200]
