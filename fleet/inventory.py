"""What a data-center inventory hands the control plane, as plain records.

Pure: parses bmcsim's GET /bmcsim/v1/inventory answer (or a JSON file of that shape), a CSV
file with one node per row, or turns the default topology into the same records, with no Django
import. Anything malformed raises InventoryError naming the node and the field.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core import validation
from core.topology import POD, NodeSpec, fabric_switches, network_ports
from fleet import fabric
from fleet.fabric import Switch  # by name: NodeRecord's field `fabric` hides the module in its body


class InventoryError(ValueError):
    pass


# An inventory no longer hands out agent tokens: a token set once and kept for ever outlived every
# tenant that read it. One that still names one is refused, so that nobody believes it is used.
RETIRED_AGENT_TOKEN = (
    "{where}: 'agent_token' is no longer taken: a node's agent gets credentials for each boot and each"
    " tenancy on its config drive (gpu-agent.json); remove the field and the token"
)


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
    fabric: fabric.Path = ()  # its domains at the fabric's levels between its pod and its rack
    # The switches serving its pod and those domains: enrolment keeps each once, whichever nodes name it.
    switches: tuple[Switch, ...] = ()
    # What the operator says of it beyond its GPUs ({"nic": "cx7"}): tenants may ask for nodes by them.
    attributes: Mapping[str, str] = field(default_factory=dict)
    # Its ends on the fabrics that keep tenants apart: its Ethernet leaf switch and port, its HCA
    # ports' GUIDs (its InfiniBand fabric is its pod, its NVLink domain its rack). None: not on that fabric.
    ethernet_switch: str = ""
    ethernet_port: str = ""
    hca_guids: tuple[str, ...] = ()


def _field(entry: Mapping[str, object], key: str, kind: type, where: str) -> Any:
    # Unlike core.validation's checks, it names Python's types: seed_fleet has always said "must be dict".
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InventoryError(f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _parse_gpu(gpu: Any, where: str) -> GPURecord:
    gpu = validation.mapping(gpu, where)
    return GPURecord(
        index=_field(gpu, "index", int, where),
        uuid=_field(gpu, "uuid", str, where),
        serial=str(gpu.get("serial", "")),
        model=_field(gpu, "model", str, where),
    )


SWITCH_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,63}")
PORT_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_./:]{0,31}")
HCA_GUID = re.compile(r"[0-9a-f]{16}")
MAX_HCA_GUIDS = 64


def parse_network(value: Any, path: str) -> tuple[str, str, tuple[str, ...]]:
    """A node's fabric ends, `{"ethernet": {"switch", "port"}, "infiniband": {"guids": [...]}}`,
    either fabric optional: its leaf switch, its port and its HCA GUIDs (16 hex digits, written
    lowercase as UFM does). validation.Invalid naming the place otherwise."""
    network = validation.mapping(value, path)
    switch = port = ""
    if (ethernet := network.get("ethernet")) is not None:
        where = validation.at(path, "ethernet")
        ethernet = validation.mapping(ethernet, where)
        switch = validation.matches(
            ethernet.get("switch"), validation.at(where, "switch"), SWITCH_NAME, "a switch name (letters, digits, -_.)"
        )
        port = validation.matches(
            ethernet.get("port"), validation.at(where, "port"), PORT_NAME, 'a port name such as "swp1"'
        )
    guids: tuple[str, ...] = ()
    if (infiniband := network.get("infiniband")) is not None:
        where = validation.at(path, "infiniband")
        listed = validation.sequence(
            validation.mapping(infiniband, where).get("guids"),
            validation.at(where, "guids"),
            min_items=1,
            max_items=MAX_HCA_GUIDS,
            expected="a list of HCA port GUIDs",
        )
        guids = tuple(
            validation.matches(
                guid.lower() if isinstance(guid, str) else guid,
                validation.at(validation.at(where, "guids"), number),
                HCA_GUID,
                "a GUID of 16 hex digits",
            )
            for number, guid in enumerate(listed)
        )
    return switch, port, guids


def check_fabric_ends(records: Iterable[NodeRecord]) -> None:
    """No two nodes share an Ethernet switch port or an HCA GUID, nor does a node name a GUID
    twice. InventoryError naming the end and its nodes otherwise."""
    owners: dict[str, str] = {}
    for record in records:
        ends = [f"HCA GUID {guid}" for guid in record.hca_guids]
        if record.ethernet_port:
            ends.append(f"port {record.ethernet_port} of {record.ethernet_switch}")
        if len(set(ends)) < len(ends):
            raise InventoryError(f"{record.name}: names an HCA GUID twice")
        for end in ends:
            if (owner := owners.setdefault(end, record.name)) != record.name:
                raise InventoryError(f"{record.name}: {end} is {owner}'s too")


ATTRIBUTE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_ATTRIBUTES = 16


def parse_attributes(value: Any, path: str) -> dict[str, str]:
    """Node attributes, {"nic": "cx7", "memory_gb": "2048"}: lowercase names, string values.
    validation.Invalid naming the place otherwise; an inventory and a reservation request check them alike."""
    attributes = validation.mapping(value, path, max_items=MAX_ATTRIBUTES)
    for name, text in attributes.items():
        validation.matches(
            name, validation.at(path, name), ATTRIBUTE_NAME, "a name of lowercase letters, digits and _, from a letter"
        )
        validation.text(text, validation.at(path, name), max_length=128)
    return dict(sorted(attributes.items()))


def parse_inventory(document: Any) -> list[NodeRecord]:
    try:
        return _records(document)
    except validation.Invalid as error:
        raise InventoryError(str(error)) from None


def _records(document: Any) -> list[NodeRecord]:
    nodes = document.get("nodes") if isinstance(document, dict) else None
    # Optional: an inventory without levels has pods and racks only.
    levels = (
        fabric.parse_levels(document["fabric_levels"])
        if isinstance(document, dict) and "fabric_levels" in document
        else None
    )
    records = []
    for number, entry in enumerate(validation.sequence(nodes, "inventory", expected="an object with a 'nodes' list")):
        entry = validation.mapping(entry, validation.at("nodes", number))
        name = _field(entry, "name", str, validation.at("nodes", number))
        if "agent_token" in entry:
            raise InventoryError(RETIRED_AGENT_TOKEN.format(where=name))
        credentials = _field(entry, "credentials", dict, name)
        gpus = _field(entry, "gpus", list, name)
        pod, rack = _field(entry, "pod", str, name), _field(entry, "rack", str, name)
        switch, port, guids = parse_network(entry.get("network", {}), f"{name}.network")
        records.append(
            NodeRecord(
                name=name,
                pod=pod,
                rack=rack,
                position=_field(entry, "position", int, name),
                serial=_field(entry, "serial", str, name),
                redfish_url=_field(entry, "redfish_url", str, name),
                system_id=_field(entry, "system_id", str, name),
                bmc_username=_field(credentials, "username", str, f"{name}.credentials"),
                bmc_password=_field(credentials, "password", str, f"{name}.credentials"),
                agent_url=_field(entry, "agent_url", str, name),
                gpus=tuple(_parse_gpu(gpu, validation.at(f"{name}.gpus", index)) for index, gpu in enumerate(gpus)),
                fabric=()
                if levels is None
                else fabric.parse_position(entry.get("fabric"), f"{name}.fabric", levels=levels, pod=pod, rack=rack),
                attributes=parse_attributes(entry.get("attributes", {}), f"{name}.attributes"),
                ethernet_switch=switch,
                ethernet_port=port,
                hca_guids=guids,
            )
        )
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise InventoryError("inventory names a node twice")
    check_fabric_ends(records)
    if levels is not None:
        fabric.check_tree((r.pod, r.rack, r.fabric) for r in records)
    if isinstance(document, dict) and "switches" in document:
        if levels is None:
            raise validation.Invalid("switches", "an inventory with switches must name its fabric_levels")
        domains: dict[str, set[str]] = defaultdict(set)
        for record in records:
            for level, domain in ((POD, record.pod), *record.fabric):
                domains[level].add(domain)
        switches = fabric.parse_switches(document["switches"], "switches", levels=levels, domains=domains)
        records = _with_switches(records, switches)
    return records


def _with_switches(records: list[NodeRecord], switches: Iterable[Switch]) -> list[NodeRecord]:
    """Each record with the switches serving its pod or one of its domains."""
    serving: dict[tuple[str, str], list[Switch]] = defaultdict(list)
    for switch in switches:
        serving[(switch.level, switch.domain)].append(switch)
    return [
        replace(
            record, switches=tuple(s for step in ((POD, record.pod), *record.fabric) for s in serving.get(step, ()))
        )
        for record in records
    ]


# A CSV inventory's columns: the JSON shape's fields, the credentials flat, and each node's GPUs as
# one model and space-separated UUIDs and serials in index order. Optional: "attributes", the
# node's attributes as space-separated name=value pairs ("nic=cx7 memory_gb=2048").
CSV_COLUMNS = (
    "name",
    "pod",
    "rack",
    "position",
    "serial",
    "redfish_url",
    "system_id",
    "bmc_username",
    "bmc_password",
    "agent_url",
    "gpu_model",
    "gpu_uuids",
    "gpu_serials",
)


def parse_csv_inventory(text: str) -> list[NodeRecord]:
    """Records from a CSV inventory with a header row naming CSV_COLUMNS (in any order)."""
    reader = csv.DictReader(io.StringIO(text))
    if "agent_token" in (reader.fieldnames or []):
        raise InventoryError(RETIRED_AGENT_TOKEN.format(where="the CSV inventory"))
    missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InventoryError(
            f"the CSV inventory has no column {', '.join(missing)} (it needs {', '.join(CSV_COLUMNS)})"
        )
    nodes = []
    for line, row in enumerate(reader, start=2):
        name = row["name"] or f"line {line}"
        if not row["position"].isdigit():
            raise InventoryError(f"{name}: 'position' must be a whole number, got {row['position']!r}")
        uuids, serials = row["gpu_uuids"].split(), row["gpu_serials"].split()
        if serials and len(serials) != len(uuids):
            raise InventoryError(f"{name}: {len(uuids)} GPU UUIDs but {len(serials)} serials")
        pairs = (row.get("attributes") or "").split()
        if malformed := [pair for pair in pairs if "=" not in pair]:
            raise InventoryError(f"{name}: 'attributes' must be name=value pairs, got {malformed[0]!r}")
        nodes.append(
            {
                **{c: row[c] for c in ("name", "pod", "rack", "serial", "redfish_url", "system_id")},
                "position": int(row["position"]),
                "credentials": {"username": row["bmc_username"], "password": row["bmc_password"]},
                "agent_url": row["agent_url"],
                "gpus": [
                    {"index": i, "uuid": u, "serial": serials[i] if serials else "", "model": row["gpu_model"]}
                    for i, u in enumerate(uuids)
                ],
                "attributes": dict(pair.split("=", 1) for pair in pairs),
            }
        )
    return parse_inventory({"nodes": nodes})


def records_from_layout(layout: list[NodeSpec], bmcsim_url: str) -> list[NodeRecord]:
    """The records bmcsim's inventory would give for this layout."""
    base = bmcsim_url.rstrip("/")
    switches = [Switch(s.name, s.kind, s.level, s.domain) for s in fabric_switches(layout)]
    ports = network_ports(layout)
    records = [
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
            fabric=spec.fabric[1:-1],
            ethernet_switch=ports[spec.name].ethernet_switch,
            ethernet_port=ports[spec.name].ethernet_port,
            hca_guids=ports[spec.name].hca_guids,
        )
        for spec in layout
    ]
    return _with_switches(records, switches)
