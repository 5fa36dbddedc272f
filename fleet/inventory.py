"""What a data-center inventory hands the control plane, as plain records.

Pure: parses bmcsim's GET /bmcsim/v1/inventory answer, or turns the default topology into the
same records, with no Django import. Anything malformed raises InventoryError naming the node
and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.topology import NodeSpec


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class GPURecord:
    index: int
    uuid: str
    serial: str
    model: str


@dataclass(frozen=True)
class NodeRecord:
    name: str
    pod: str
    rack: str
    position: int
    serial: str
    redfish_url: str
    system_id: str
    bmc_username: str
    bmc_password: str
    agent_url: str
    gpus: tuple[GPURecord, ...]


def _field(entry: dict, key: str, kind: type, where: str) -> Any:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InventoryError(f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _parse_gpu(gpu: Any, node: str) -> GPURecord:
    if not isinstance(gpu, dict):
        raise InventoryError(f"{node}: every gpu must be an object")
    return GPURecord(
        index=_field(gpu, "index", int, f"{node} gpu"),
        uuid=_field(gpu, "uuid", str, f"{node} gpu"),
        serial=str(gpu.get("serial", "")),
        model=_field(gpu, "model", str, f"{node} gpu"),
    )


def parse_inventory(document: Any) -> list[NodeRecord]:
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise InventoryError("inventory must be an object with a 'nodes' list")
    records = []
    for number, entry in enumerate(document["nodes"], start=1):
        if not isinstance(entry, dict):
            raise InventoryError(f"node #{number}: must be an object")
        name = _field(entry, "name", str, f"node #{number}")
        credentials = _field(entry, "credentials", dict, name)
        gpus = tuple(_parse_gpu(gpu, name) for gpu in _field(entry, "gpus", list, name))
        records.append(
            NodeRecord(
                name=name,
                pod=_field(entry, "pod", str, name),
                rack=_field(entry, "rack", str, name),
                position=_field(entry, "position", int, name),
                serial=_field(entry, "serial", str, name),
                redfish_url=_field(entry, "redfish_url", str, name),
                system_id=_field(entry, "system_id", str, name),
                bmc_username=_field(credentials, "username", str, f"{name} credentials"),
                bmc_password=_field(credentials, "password", str, f"{name} credentials"),
                agent_url=_field(entry, "agent_url", str, name),
                gpus=gpus,
            )
        )
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise InventoryError("inventory names a node twice")
    return records


def records_from_layout(layout: list[NodeSpec], bmcsim_url: str) -> list[NodeRecord]:
    """The records bmcsim's inventory would give for this layout."""
    base = bmcsim_url.rstrip("/")
    return [
        NodeRecord(
            name=spec.name,
            pod=spec.pod,
            rack=spec.rack,
            position=spec.position,
            serial=spec.serial,
            redfish_url=base,
            system_id=spec.name,
            bmc_username=spec.bmc_username,
            bmc_password=spec.bmc_password,
            agent_url=f"{base}/agent/{spec.name}",
            gpus=tuple(GPURecord(index=g.index, uuid=g.uuid, serial=g.serial, model=g.model) for g in spec.gpus),
        )
        for spec in layout
    ]
