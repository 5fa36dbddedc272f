"""Writes to the fleet: enrolment, lifecycle transitions and changes of BMC access.

`transition` (for operators, the reconciler, reservations and remediation) and `complete` (a
worker's result under its lease) are the only code that changes a node's state. Both apply the
pure state machine of fleet/lifecycle.py with a compare-and-set on the old state (and, for a
worker, on its lease's fencing token, fleet/leases.py) and write the audit row in the same
transaction.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from core.due_work import take_due
from core.errors import Conflict, TooMany
from core.topology import POD
from fleet import diagnostics, firmware, leases, lifecycle, selectors
from fleet.bmc_access import BMCAddressRefused, bmc_host, check_bmc_host, check_bmc_url
from fleet.catalogue import ImageRecord
from fleet.inventory import NodeRecord
from fleet.leases import Lease
from fleet.models import (
    GPU,
    AddressPool,
    AuditEvent,
    AuditOnlyEvent,
    ConfigDrive,
    FabricDomain,
    FabricLevel,
    FabricSwitch,
    FirmwareBaseline,
    FirmwareBaselineComponent,
    IdleDiagnosticRun,
    IdleDiagnosticStatus,
    Image,
    Node,
    NodeAddress,
    NodeState,
    Pod,
    Rack,
)
from fleet.signals import node_transitioned, power_action_requested

ENROLMENT_BATCH = 500
# How a node's BMC and agent are reached; the secrets among them are audited as changed, never by value.
BMC_ACCESS_FIELDS = ["redfish_url", "system_id", "bmc_username", "bmc_password", "agent_url", "agent_token"]
SECRET_ACCESS_FIELDS = ("bmc_password", "agent_token")


class ConcurrentTransition(lifecycle.TransitionRefused):
    """Another writer changed the node between our read and our compare-and-set."""

    def __init__(self, node: str, expected_state: str):
        super().__init__(f"node {node} left state {expected_state!r} before this transition could apply")


def _state_fields(node: Node, new_state: lifecycle.State, event: lifecycle.Event, reason: str, reservation) -> dict:
    fields = {"state": new_state.value}
    if new_state != node.state:
        # A new state starts afresh: no step yet, and whatever lease was held is over.
        fields.update(state_since=Now(), step="", step_since=None, lease_owner="", lease_expires_at=None)
    if new_state not in lifecycle.SERVING_STATES:
        fields.update(reservation=None, ssh_host_key_fingerprint="", reinstall_image=None)
    if event is lifecycle.Event.REINSTALL_REQUESTED:
        fields["ssh_host_key_fingerprint"] = ""  # a new instance: new host keys, a new config drive
    if new_state in lifecycle.CLEAN_STATES:
        fields["tenant"] = None  # only a wipe makes a node clean; the tenant stays until then
    if event is lifecycle.Event.PROVISION_REQUESTED:
        if reservation is None:
            raise ValueError(f"{event.value} for node {node.name} needs the reservation it serves")
        fields.update(tenant_id=reservation.tenant_id, reservation=reservation)
    if new_state is lifecycle.State.QUARANTINED:
        fields["quarantine_reason"] = f"{event.value}: {reason}" if reason else event.value
    elif node.state == NodeState.QUARANTINED:
        fields["quarantine_reason"] = ""
    return fields


def transition(
    *,
    node_id: int,
    event: lifecycle.Event | str,
    actor: str,
    reason: str = "",
    reservation=None,
    detail: dict | None = None,
) -> Node:
    """Apply `event` to the node and audit it; returns the updated node.

    Raises lifecycle.IllegalTransition if the state machine refuses the event, and
    ConcurrentTransition if someone else changed the node first. A change of state ends any
    lease on the node: the new state's work is claimed afresh (fleet.signals.node_transitioned
    tells who sends it).
    """
    return _apply(node_id=node_id, event=event, actor=actor, reason=reason, reservation=reservation, detail=detail)


def complete(
    lease: Lease, *, event: lifecycle.Event | str, actor: str, reason: str = "", detail: dict | None = None
) -> Node | None:
    """Apply a worker's result as a lifecycle event under its lease; the updated node, or None if
    the lease no longer holds (a successor took the node, or it moved on), the discard audited.
    Raises lifecycle.IllegalTransition if the event does not fit the node while the lease holds."""
    return _apply(node_id=lease.node_id, event=event, actor=actor, reason=reason, detail=detail, lease=lease)


def _apply(
    *,
    node_id: int,
    event: lifecycle.Event | str,
    actor: str,
    reason: str,
    detail: dict | None,
    reservation=None,
    lease: Lease | None = None,
) -> Node | None:
    """The compare-and-set of both: on the node's state and, under a lease, on its fencing token."""
    event = lifecycle.Event(event)
    applied = False
    with transaction.atomic():
        node = Node.objects.get(pk=node_id)
        try:
            new_state = lifecycle.next_state(node.state, event)
        except lifecycle.IllegalTransition:
            # A worker whose lease has gone reports on a node that has moved on: a discard, not a bug.
            if lease is None or leases.fenced(Node.objects.filter(pk=node_id), lease).exists():
                raise
            new_state = None
        if new_state is not None:
            target = Node.objects.filter(pk=node_id, state=node.state)
            if lease is not None:
                target = leases.fenced(target, lease)
            applied = target.update(**_state_fields(node, new_state, event, reason, reservation)) == 1
        if applied:
            if new_state not in lifecycle.SERVING_STATES:
                _forget_tenant_network(node_id)
            elif event is lifecycle.Event.REINSTALL_REQUESTED:
                ConfigDrive.objects.filter(node_id=node_id).delete()
            AuditEvent.objects.create(
                node_id=node_id,
                actor=actor,
                event=event.value,
                from_state=node.state,
                to_state=new_state.value,
                reason=reason,
                detail=detail or {},
            )
            node_transitioned.send(
                sender=Node,
                node_id=node_id,
                event=event,
                actor=actor,
                from_state=lifecycle.State(node.state),
                to_state=new_state,
                reservation_id=node.reservation_id,
            )
    if applied:
        return Node.objects.get(pk=node_id)
    if lease is not None:
        leases.record_discarded_result(lease=lease, attempted=event.value, actor=actor)
        return None
    raise ConcurrentTransition(node.name, node.state)


def start_inspections(*, actor: str, limit: int) -> int:
    """Send newly enrolled nodes to inspection."""
    started = 0
    for node_id in Node.objects.filter(state=NodeState.ENROLLED).order_by("pk").values_list("pk", flat=True)[:limit]:
        try:
            transition(node_id=node_id, event=lifecycle.Event.INSPECTION_STARTED, actor=actor)
            started += 1
        except lifecycle.TransitionRefused:
            continue
    return started


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
    FabricLevelsChanged if the records name other fabric levels than the fleet has. Racks move
    to the fabric domains the records give them, and the switches they name are enrolled (health
    unknown until read) or moved to the domain they now serve. `progress`, if given, is called
    with the number of records handled after each batch.
    """
    records = list(records)
    _check_bmc_addresses(records)
    _check_fabric_levels(records)
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
            agent_token=r.agent_token,
            attributes=dict(r.attributes),
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
        if node and (detail := _bmc_change(node, access)):
            for field, value in access.items():
                setattr(node, field, value)
            changed.append(node)
            audit.append(_bmc_change_audit(node, actor, detail))
    Node.objects.bulk_update(changed, BMC_ACCESS_FIELDS)
    AuditEvent.objects.bulk_create(audit)
    return len(changed)


def _describe_known_nodes(batch: list[NodeRecord], known: dict[str, Node]) -> None:
    """Attributes are the inventory's to say: the latest one's stand, as placement reads them."""
    described = []
    for r in batch:
        if (node := known.get(r.name)) and node.attributes != r.attributes:
            node.attributes = dict(r.attributes)
            described.append(node)
    Node.objects.bulk_update(described, ["attributes"])


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


def _bmc_change(node: Node, access: dict) -> dict:
    """What the new access changes, fit for the audit log: a secret only as changed or not."""
    return {
        field: "changed" if field in SECRET_ACCESS_FIELDS else {"from": getattr(node, field), "to": value}
        for field, value in access.items()
        if getattr(node, field) != value
    }


def _audit_only(
    node: Node, event: AuditOnlyEvent, *, actor: str, reason: str, detail: dict | None = None
) -> AuditEvent:
    """An audit row of something done to the node that leaves its state as it was (unsaved)."""
    return AuditEvent(
        node=node,
        actor=actor,
        event=event,
        from_state=node.state,
        to_state=node.state,
        reason=reason,
        detail=detail or {},
    )


def _bmc_change_audit(node: Node, actor: str, detail: dict) -> AuditEvent:
    reason = f"BMC access changed: {', '.join(detail)}"
    return _audit_only(node, AuditOnlyEvent.BMC_CHANGED, actor=actor, reason=reason, detail=detail)


def change_bmc_access(
    *,
    node_id: int,
    actor: str,
    redfish_url: str,
    system_id: str,
    bmc_username: str,
    bmc_password: str,
    agent_url: str,
    agent_token: str,
) -> Node:
    """Give the node new BMC and agent access (the secrets always with it) and audit what changed.

    Raises BMCAddressRefused if the BMC or agent URL is outside the BMC networks. The audit
    row names the fields that changed, with old and new values, but never a secret's.
    """
    for url in filter(None, (redfish_url, agent_url)):
        check_bmc_url(url)
    access = {
        "redfish_url": redfish_url,
        "system_id": system_id,
        "bmc_username": bmc_username,
        "bmc_password": bmc_password,
        "agent_url": agent_url,
        "agent_token": agent_token,
    }
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        detail = _bmc_change(node, access)
        if detail:
            Node.objects.filter(pk=node_id).update(**access)
            _bmc_change_audit(node, actor, detail).save()
    return Node.objects.get(pk=node_id)


# -- the tenant network: addresses and config drives --------------------------------------------

ADDRESS_ATTEMPTS = 8


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


class NoAddressFree(Conflict):
    pass


def _forget_tenant_network(node_id: int) -> None:
    """A node that stops serving gives back its address and its config drive (whose URL then 404s)."""
    NodeAddress.objects.filter(node_id=node_id).delete()
    ConfigDrive.objects.filter(node_id=node_id).delete()


def assign_address(*, node_id: int) -> NodeAddress | None:
    """The serving node's tenant-network address, from its pod's pools, lowest free first.

    None if its pod has no pool (the tenant network is then the site's DHCP). Raises
    NoAddressFree if every pool of the pod is full. Two nodes taking the same address at
    once are told apart by the unique address: the loser takes the next one.
    """
    node = Node.objects.select_related("rack").get(pk=node_id)
    if (held := NodeAddress.objects.filter(node_id=node_id).select_related("pool").first()) is not None:
        return held
    pools = list(AddressPool.objects.filter(pod_id=node.rack.pod_id).order_by("id"))
    if not pools:
        return None
    for _ in range(ADDRESS_ATTEMPTS):
        free = _first_free(pools)
        if free is None:
            raise NoAddressFree(f"every address of pod {node.rack.pod.name}'s pools is taken")
        pool, address = free
        try:
            with transaction.atomic():
                return NodeAddress.objects.create(node_id=node_id, pool=pool, address=address)
        except IntegrityError:
            continue
    raise NoAddressFree(f"lost {ADDRESS_ATTEMPTS} races for an address in pod {node.rack.pod.name}")


def _first_free(pools: list[AddressPool]) -> tuple[AddressPool, str] | None:
    for pool in pools:
        network = ipaddress.ip_network(pool.network)
        taken = {
            ipaddress.ip_address(a) for a in NodeAddress.objects.filter(pool=pool).values_list("address", flat=True)
        }
        if pool.gateway:
            taken.add(ipaddress.ip_address(pool.gateway))
        for address in network.hosts():
            if address not in taken:
                return pool, str(address)
    return None


def config_drive_token(*, node_id: int, build: Callable[[], bytes]) -> str:
    """The unguessable token of the URL the node's BMC fetches its config drive from; the drive
    is built once per tenancy (a resumed provisioning finds it) and goes when the node stops serving."""
    drive = ConfigDrive.objects.filter(node_id=node_id).first()
    if drive is None:
        drive = ConfigDrive.objects.create(node_id=node_id, token=secrets.token_urlsafe(32), iso=build())
    return drive.token


def record_host_key(*, node_id: int, fingerprint: str) -> None:
    Node.objects.filter(pk=node_id, state__in=[s.value for s in lifecycle.SERVING_STATES]).update(
        ssh_host_key_fingerprint=fingerprint
    )


# -- the operators' catalogue and pools ---------------------------------------------------------


def import_images(records: Iterable[ImageRecord]) -> tuple[int, int]:
    """Add the catalogue's images and bring known ones (by name) up to date; (added, updated). The
    catalogue's default, if it names one, becomes the only default."""
    added = updated = 0
    with transaction.atomic():
        for record in records:
            fields = {f: getattr(record, f) for f in ("os", "url", "sha256", "boot_mode", "needs_secure_boot")}
            if record.default:
                Image.objects.filter(default=True).exclude(name=record.name).update(default=False)
                fields["default"] = True
            image, created = Image.objects.get_or_create(name=record.name, defaults=fields)
            if created:
                added += 1
            elif any(getattr(image, f) != value for f, value in fields.items()):
                Image.objects.filter(pk=image.pk).update(**fields)
                updated += 1
    return added, updated


def add_address_pool(*, pod: str, network: str, gateway: str | None = None, ssh_port: int = 22) -> bool:
    """Give the pod a pool of tenant-network addresses; False if it has that pool already.
    Raises django's ValidationError for a network that is not one, or a gateway outside it."""
    pool = AddressPool(pod=Pod.objects.get(name=pod), network=network, gateway=gateway, ssh_port=ssh_port)
    if AddressPool.objects.filter(network=network, pod=pool.pod).exists():
        return False
    pool.full_clean()
    pool.save()
    return True


# -- tenants' power actions -----------------------------------------------------------------------

POWER_ACTIONS = ("reboot", "power-cycle")


class PowerActionRefused(Conflict):
    """The node is not up for one."""


class TooManyPowerActions(TooMany):
    """The node had as many as it may this hour."""


def request_power_action(*, node_id: int, action: str, actor: str) -> None:
    """Audit a tenant's reboot or power cycle of its active node and have the BMC do it on commit;
    at most TENANT_POWER_ACTIONS_PER_HOUR a node, counted under the node's row lock."""
    if action not in POWER_ACTIONS:
        raise ValueError(action)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.state != NodeState.ACTIVE:
            raise PowerActionRefused(f"{node.name} is {node.state}: only an active node can be rebooted")
        hour = AuditEvent.objects.filter(
            node_id=node_id,
            event=AuditOnlyEvent.POWER_ACTION,
            actor__startswith="tenant:",
            at__gte=Now() - timedelta(hours=1),
        ).count()
        if hour >= settings.TENANT_POWER_ACTIONS_PER_HOUR:
            raise TooManyPowerActions(
                f"{node.name} had {hour} power actions in the last hour, the most a node may; try again later"
            )
        audit_power_action(node, actor=actor, reason=action)
        power_action_requested.send(sender=Node, node_id=node_id, action=action, reservation_id=node.reservation_id)


def audit_power_action(node: Node, *, actor: str, reason: str) -> None:
    _audit_only(node, AuditOnlyEvent.POWER_ACTION, actor=actor, reason=reason).save()


def request_reinstall(*, node_id: int, image: Image | None, actor: str) -> Node:
    """The tenant's reinstall of its active node: provisioned again for the same reservation, its
    drives erased first (a new image on an old disk keeps the old data), with `image` if given,
    else the one it booted. Raises lifecycle.IllegalTransition unless the node is active."""
    with transaction.atomic():
        node = transition(
            node_id=node_id,
            event=lifecycle.Event.REINSTALL_REQUESTED,
            actor=actor,
            reason=f"reinstall with {image.name}" if image else "reinstall",
        )
        if image is not None:
            Node.objects.filter(pk=node_id).update(reinstall_image=image)
    return node


# -- diagnostics --------------------------------------------------------------------------------

# One lock for every process that opens idle runs, so the cap is counted once ("diag" in ASCII).
IDLE_DIAGNOSTICS_LOCK = 0x64696167
# Where an idle run's failure quarantines the node: still idle, or just taken by placement (a tenant
# must not get a GPU that failed). A node an operator took, or that is on its way back through a wipe,
# is out of service already, and its way back ends in a burn-in.
IDLE_VERDICT_STATES = frozenset({lifecycle.State.AVAILABLE, lifecycle.State.PROVISIONING})


def record_diagnostics_pass(*, node_id: int, level: int) -> None:
    """The node passed a diagnostics run of `level` just now (at inspection, or idle)."""
    Node.objects.filter(pk=node_id).update(diagnostic_passed_at=Now(), diagnostic_level=level)


def open_idle_diagnostics(*, at_once: int) -> list[int]:
    """Open long runs on the available nodes that are due one (selectors.due_for_idle_diagnostics),
    as many as keep at most `at_once` under way fleet-wide; the new runs, due for a look now."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [IDLE_DIAGNOSTICS_LOCK])
        room = at_once - IdleDiagnosticRun.objects.filter(status=IdleDiagnosticStatus.RUNNING).count()
        if room <= 0:
            return []
        runs = IdleDiagnosticRun.objects.bulk_create(
            IdleDiagnosticRun(node_id=node_id, level=diagnostics.LONG)
            for node_id in selectors.due_for_idle_diagnostics(limit=room)
        )
    return [run.pk for run in runs]


def take_due_idle_diagnostics(*, limit: int) -> list[int]:
    """The runs under way whose next look is due, each due again a poll period later; the caller
    has a worker look at each. As with repairs, the due time is in the database: a look whose
    message is lost, or dropped on expiry in a backlog, is simply due again."""
    return take_due(
        IdleDiagnosticRun.objects.filter(status=IdleDiagnosticStatus.RUNNING),
        due_field="look_due_at",
        again_in=timedelta(seconds=settings.IDLE_DIAGNOSTICS_POLL_SECONDS),
        limit=limit,
    )


def idle_diagnostics_started(*, run_id: int, started_at: datetime) -> bool:
    """Record when the agent says it started the run; False if the run ended meanwhile (preempted
    while the agent was starting it): the caller stops what it started."""
    started = IdleDiagnosticRun.objects.filter(
        pk=run_id, status=IdleDiagnosticStatus.RUNNING, started_at__isnull=True
    ).update(started_at=started_at)
    return started == 1


def end_idle_diagnostics(*, run_id: int, status: IdleDiagnosticStatus, actor: str, detail: str = "") -> str:
    """End the run, if it is still under way, with `status`: a pass is recorded on the node; a
    failure (`detail` names the test and GPU, diagnostics.verdict) quarantines the node
    `diagnostic_failed` in IDLE_VERDICT_STATES. Returns the run's status: an ended run keeps the
    one it ended with. ConcurrentTransition if the node moved meanwhile: nothing is recorded."""
    with transaction.atomic():
        ended = IdleDiagnosticRun.objects.filter(pk=run_id, status=IdleDiagnosticStatus.RUNNING).update(
            status=status, ended_at=Now(), detail=detail
        )
        run = IdleDiagnosticRun.objects.select_related("node").get(pk=run_id)
        if not ended:
            return run.status
        if status == IdleDiagnosticStatus.PASSED:
            record_diagnostics_pass(node_id=run.node_id, level=run.level)
        elif status == IdleDiagnosticStatus.FAILED and run.node.state in IDLE_VERDICT_STATES:
            transition(
                node_id=run.node_id,
                event=lifecycle.Event.DIAGNOSTIC_FAILED,
                actor=actor,
                reason=detail,
                detail={"idle_diagnostic_run": run_id, "level": run.level},
            )
    return status


# -- firmware baselines -------------------------------------------------------------------------


def set_firmware_baselines(baselines: Iterable[firmware.Baseline]) -> tuple[int, int]:
    """Make each the baseline of its node class (its GPU model), replacing the class's old one
    whole; (added, replaced). IntegrityError if a name is another class's baseline's."""
    added = replaced = 0
    with transaction.atomic():
        for baseline in baselines:
            row, created = FirmwareBaseline.objects.update_or_create(
                gpu_model=baseline.gpu_model,
                defaults={
                    "name": baseline.name,
                    "bios_attributes": dict(baseline.bios_attributes),
                    "secure_boot_required": baseline.secure_boot_required,
                    "boot_releases": list(baseline.boot_releases),
                },
            )
            row.components.all().delete()
            FirmwareBaselineComponent.objects.bulk_create(
                FirmwareBaselineComponent(
                    baseline=row, component=name, version=expected.version, sha256=expected.sha256, image=expected.image
                )
                for name, expected in baseline.components.items()
            )
            if created:
                added += 1
            else:
                replaced += 1
    return added, replaced


def record_firmware_check(*, node: Node, actor: str, baseline: str, found: firmware.Found, repaired: list[str]) -> None:
    """Audit that the node runs its baseline: what it runs, and what this inspection repaired to get
    there. Attestation signs it into the node's result (selectors.firmware_checked_in_this_state)."""
    reason = f"matches baseline {baseline}" + (f" after repairing {', '.join(repaired)}" if repaired else "")
    detail = {"baseline": baseline, **found.facts(), "repaired": repaired}
    _audit_only(node, AuditOnlyEvent.FIRMWARE_CHECKED, actor=actor, reason=reason, detail=detail).save()
