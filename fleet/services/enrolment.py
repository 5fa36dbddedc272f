"""Enrolment: new nodes from an inventory's records, with their racks, fabric domains, switches
and places on the fabrics that keep tenants apart; known nodes keep their state and take the
records' access, attributes and fabric ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from core.errors import Conflict
from core.topology import ETHERNET, INFINIBAND, NVLINK, POD
from fleet.bmc_access import BMCAddressRefused, bmc_host, check_bmc_host
from fleet.inventory import NodeRecord, check_fabric_ends
from fleet.models import (
    GPU,
    AuditEvent,
    AuditOnlyEvent,
    FabricDomain,
    FabricLevel,
    FabricSwitch,
    NetworkAttachment,
    Node,
    NodeState,
    Pod,
    Rack,
)
from fleet.services.access_changes import BMC_ACCESS_FIELDS, bmc_change, bmc_change_audit
from fleet.services.tenant_networks import ensure_segment_pools

ENROLMENT_BATCH = 500


@dataclass(frozen=True)
class EnrolmentResult:
    created: int
    updated: int


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def enrol_nodes(*, records: Iterable[NodeRecord], actor: str, progress=None) -> EnrolmentResult:
    """Enrol new nodes (state `enrolled`, one audit row each); refresh BMC access of known ones.

    Idempotent: a node already enrolled keeps its state, position and GPUs; a change of its BMC
    access is audited, and its attributes become the records'. Raises BMCAddressRefused, before
    writing anything, if a record's BMC or agent URL is outside the BMC networks, and
    FabricLevelsChanged if the records name other fabric levels than the fleet has, and
    FabricEndTaken if they give a node an Ethernet port or HCA GUID another node holds. Each node
    gets its place on each fabric it is on (NetworkAttachment, on no tenant's network). Racks move
    to the fabric domains the records give them, and the switches they name are enrolled (health
    unknown until read) or moved to the domain they now serve. `progress`, if given, is called
    with the number of records handled after each batch.
    """
    records = list(records)
    _check_bmc_addresses(records)
    _check_fabric_levels(records)
    _check_fabric_ends(records)
    _let_go_of_moved_ports(records)
    ensure_segment_pools()
    pods = {name: Pod.objects.get_or_create(name=name)[0] for name in sorted({r.pod for r in records})}
    racks = _enrol_racks(records, pods)
    _place_racks_in_fabric(records, pods, racks)
    _enrol_switches(records, pods)
    created = updated = 0
    for batch in _batches(records, ENROLMENT_BATCH):
        with transaction.atomic():
            known = {n.name: n for n in Node.objects.filter(name__in=[r.name for r in batch])}
            created += _enrol_new_nodes([r for r in batch if r.name not in known], racks, actor)
            updated += _refresh_bmc_access(batch, known, actor)
            _describe_known_nodes(batch, known)
        if progress:
            progress(len(batch))
    _attach_to_fabrics(records)
    return EnrolmentResult(created=created, updated=updated)


def _enrol_racks(records: list[NodeRecord], pods: dict[str, Pod]) -> dict[str, Rack]:
    """The records' racks by name, those not known yet created in their pods."""
    rack_pods = {r.rack: pods[r.pod] for r in records}
    known_racks = set(Rack.objects.filter(name__in=rack_pods).values_list("name", flat=True))
    Rack.objects.bulk_create(Rack(name=name, pod=pod) for name, pod in rack_pods.items() if name not in known_racks)
    return Rack.objects.in_bulk(list(rack_pods), field_name="name")


def _enrol_new_nodes(new: list[NodeRecord], racks: dict[str, Rack], actor: str) -> int:
    """Create the nodes, each `enrolled` with its audit row, and their GPUs; how many."""
    nodes = Node.objects.bulk_create(
        Node(
            name=r.name,
            rack=racks[r.rack],
            position=r.position,
            serial=r.serial,
            redfish_url=r.redfish_url,
            system_id=r.system_id,
            bmc_username=r.bmc_username,
            bmc_password=r.bmc_password,
            agent_url=r.agent_url,
            attributes=dict(r.attributes),
            ethernet_switch=r.ethernet_switch,
            ethernet_port=r.ethernet_port,
            hca_guids=list(r.hca_guids),
        )
        for r in new
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(node=n, actor=actor, event=AuditOnlyEvent.ENROLLED, to_state=NodeState.ENROLLED) for n in nodes
    )
    GPU.objects.bulk_create(
        GPU(node=node, index=g.index, uuid=g.uuid, serial=g.serial, model=g.model)
        for node, r in zip(nodes, new, strict=True)
        for g in r.gpus
    )
    return len(nodes)


def _refresh_bmc_access(batch: list[NodeRecord], known: dict[str, Node], actor: str) -> int:
    """Known nodes take the records' BMC access, each change audited; how many changed."""
    changed, audit = [], []
    for r in batch:
        node = known.get(r.name)
        access = {f: getattr(r, f) for f in BMC_ACCESS_FIELDS}
        if node and (detail := bmc_change(node, access)):
            for field, value in access.items():
                setattr(node, field, value)
            changed.append(node)
            audit.append(bmc_change_audit(node, actor, detail))
    Node.objects.bulk_update(changed, BMC_ACCESS_FIELDS)
    AuditEvent.objects.bulk_create(audit)
    return len(changed)


DESCRIBED_FIELDS = ["attributes", "ethernet_switch", "ethernet_port", "hca_guids"]


def _describe_known_nodes(batch: list[NodeRecord], known: dict[str, Node]) -> None:
    """Attributes and fabric ends are the inventory's to say: the latest one's stand, as placement
    and the fabric syncer read them."""
    described = []
    for r in batch:
        said = {
            "attributes": dict(r.attributes),
            "ethernet_switch": r.ethernet_switch,
            "ethernet_port": r.ethernet_port,
            "hca_guids": list(r.hca_guids),
        }
        if (node := known.get(r.name)) and any(getattr(node, field) != value for field, value in said.items()):
            for field, value in said.items():
                setattr(node, field, value)
            described.append(node)
    Node.objects.bulk_update(described, DESCRIBED_FIELDS)


def _let_go_of_moved_ports(records: list[NodeRecord]) -> None:
    """Known nodes whose Ethernet port the inventory moves let go of it first, so that a port may
    pass from one node to another (a new layout); a holder outside the inventory is FabricEndTaken."""
    said = {r.name: (r.ethernet_switch, r.ethernet_port) for r in records}
    held = Node.objects.filter(name__in=said).exclude(ethernet_port="")
    moved = [
        pk
        for pk, name, *port in held.values_list("pk", "name", "ethernet_switch", "ethernet_port")
        if said[name] != tuple(port)
    ]
    Node.objects.filter(pk__in=moved).update(ethernet_switch="", ethernet_port="")


class FabricEndTaken(Conflict):
    """An inventory gives a node an Ethernet port or an HCA GUID that another node holds."""


def _check_fabric_ends(records: list[NodeRecord]) -> None:
    """Each port and GUID belongs to one node: among the records, and against the fleet's other nodes."""
    check_fabric_ends(records)
    names = {r.name for r in records}
    ports = {(r.ethernet_switch, r.ethernet_port): r.name for r in records if r.ethernet_port}
    guids = {guid: r.name for r in records for guid in r.hca_guids}
    others = Node.objects.exclude(name__in=names)
    holders = others.filter(
        Q(ethernet_switch__in={switch for switch, _ in ports}, ethernet_port__in={port for _, port in ports})
        | Q(hca_guids__overlap=list(guids))
    ).values_list("name", "ethernet_switch", "ethernet_port", "hca_guids")
    for holder, switch, port, held in holders:
        if (switch, port) in ports:
            raise FabricEndTaken(f"{ports[switch, port]}: port {port} of {switch} is {holder}'s")
        if taken := sorted(set(held) & guids.keys()):
            raise FabricEndTaken(f"{guids[taken[0]]}: HCA GUID {taken[0]} is {holder}'s")


def _attach_to_fabrics(records: list[NodeRecord]) -> None:
    """Each node its place on each fabric it is on, on no tenant's network yet: Ethernet with a
    port, InfiniBand with HCA GUIDs, NVLink with GPUs in a rack (its NVLink domain) of more than
    one such node. Places a node already has stay as they are; a fabric it has left keeps its
    place (its membership must still be taken off there)."""
    for batch in _batches(records, ENROLMENT_BATCH):
        nodes = Node.objects.filter(name__in=[r.name for r in batch]).values_list("pk", "ethernet_port", "hca_guids")
        NetworkAttachment.objects.bulk_create(
            [
                NetworkAttachment(node_id=pk, fabric=fabric)
                for pk, port, guids in nodes
                for fabric, on in ((ETHERNET, port), (INFINIBAND, guids))
                if on
            ],
            ignore_conflicts=True,
        )
    # A rack's nodes with GPUs, the records' or not: a second one makes the first one's an NVLink domain too.
    with_gpus = Node.objects.filter(rack__name__in={r.rack for r in records}, gpus__isnull=False)
    racks = dict(with_gpus.values_list("pk", "rack_id").distinct())
    per_rack = Counter(racks.values())
    NetworkAttachment.objects.bulk_create(
        (NetworkAttachment(node_id=pk, fabric=NVLINK) for pk, rack in racks.items() if per_rack[rack] > 1),
        ignore_conflicts=True,
        batch_size=ENROLMENT_BATCH,
    )


def _check_bmc_addresses(records: list[NodeRecord]) -> None:
    checked = set()  # a fleet shares a few BMC hosts: resolve each once
    for r in records:
        for url in filter(None, (r.redfish_url, r.agent_url)):
            try:
                host = bmc_host(url)
                if host not in checked:
                    check_bmc_host(*host)
                    checked.add(host)
            except BMCAddressRefused as exc:
                raise BMCAddressRefused(f"node {r.name}: {exc}") from exc


class FabricLevelsChanged(Conflict):
    """An inventory names other fabric levels than the fleet's: levels are not redrawn by enrolment."""


def _check_fabric_levels(records: list[NodeRecord]) -> None:
    levels = next((tuple(level for level, _ in r.fabric) for r in records if r.fabric), None)
    known = tuple(FabricLevel.objects.order_by("depth").values_list("name", flat=True))
    if levels is not None and known and levels != known:
        raise FabricLevelsChanged(
            f"the inventory's fabric levels between pod and rack are {', '.join(levels)}; "
            f"the fleet's are {', '.join(known)}"
        )


def _place_racks_in_fabric(records: list[NodeRecord], pods: dict[str, Pod], racks: dict[str, Rack]) -> None:
    """Create the fabric's levels and domains the records name, top down, and put each rack under
    its deepest one. Records without a fabric leave their racks where they are."""
    paths = {r.rack: (r.pod, r.fabric) for r in records if r.fabric}
    if not paths:
        return
    levels = [level for level, _ in next(iter(paths.values()))[1]]
    if not FabricLevel.objects.exists():
        FabricLevel.objects.bulk_create(FabricLevel(name=name, depth=depth) for depth, name in enumerate(levels, 1))
    level_ids = dict(FabricLevel.objects.values_list("name", "pk"))
    named = {name for _, path in paths.values() for _, name in path}
    domains = {d.name: d for d in FabricDomain.objects.filter(name__in=named)}
    for depth in range(len(levels)):
        wanted = {}
        for pod, path in paths.values():
            level, name = path[depth]
            parent = domains[path[depth - 1][1]] if depth else None
            wanted[name] = FabricDomain(name=name, level_id=level_ids[level], pod=pods[pod], parent=parent)
        moved = [d for name, d in wanted.items() if name in domains and _domain_moved(domains[name], d)]
        for domain in moved:
            domain.pk = domains[domain.name].pk
        FabricDomain.objects.bulk_update(moved, ["level", "pod", "parent"])
        FabricDomain.objects.bulk_create(d for name, d in wanted.items() if name not in domains)
        domains |= {d.name: d for d in FabricDomain.objects.filter(name__in=wanted)}
    placed = []
    for name, (_, path) in paths.items():
        rack = racks[name]
        if rack.fabric_domain_id != domains[path[-1][1]].pk:
            rack.fabric_domain = domains[path[-1][1]]
            placed.append(rack)
    Rack.objects.bulk_update(placed, ["fabric_domain"])


def _enrol_switches(records: list[NodeRecord], pods: dict[str, Pod]) -> None:
    """Create the switches the records name, or point a known one at the kind and domain it now has;
    its health stays as last read."""
    switches = {switch.name: switch for r in records for switch in r.switches}
    if not switches:
        return
    domains = FabricDomain.objects.in_bulk([s.domain for s in switches.values() if s.level != POD], field_name="name")
    wanted = [
        FabricSwitch(
            name=s.name,
            kind=s.kind,
            pod=pods[s.domain] if s.level == POD else None,
            fabric_domain=None if s.level == POD else domains[s.domain],
        )
        for s in switches.values()
    ]
    known = FabricSwitch.objects.in_bulk(list(switches), field_name="name")
    moved = [s for s in wanted if s.name in known and _serving(known[s.name]) != _serving(s)]
    for switch in moved:
        switch.pk = known[switch.name].pk
    FabricSwitch.objects.bulk_update(moved, ["kind", "pod", "fabric_domain"])
    FabricSwitch.objects.bulk_create(switch for switch in wanted if switch.name not in known)


def _serving(switch: FabricSwitch) -> tuple:
    return switch.kind, switch.pod_id, switch.fabric_domain_id


def _domain_moved(known: FabricDomain, wanted: FabricDomain) -> bool:
    return (known.level_id, known.pod_id, known.parent_id) != (wanted.level_id, wanted.pod_id, wanted.parent_id)
