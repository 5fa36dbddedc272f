"""Putting nodes on the networks their attachments name, and reading every fabric back.

A sync takes one fabric at a time under a PostgreSQL session advisory lock (try-lock: a second
sync of the same fabric returns at once; the first goes round again for what changed meanwhile).
It reads the attachments to act on (the unconfirmed ones; `full`: every one, for drift), groups
them by manager (Ethernet: the node's leaf switch and its port; InfiniBand: the node's pod, with
its HCA GUIDs; NVLink: the node's NVLink domain, its rack, with its GPUs' UUIDs), and for each
manager, MANAGERS_AT_ONCE at a time in threads that touch no database: reads its ports once,
applies what differs as one batch, reads back. Then it records what it learnt in one transaction
(fleet.services.network_attachments.record_readback). A manager that is down or refuses leaves
its attachments unconfirmed with the problem named, and the others go on.

A serving node found off its tenant's networks (drift) that cannot be put back is let go of its
reservation (reservations.services.networks); it stays held until its removal is read back.

Sent on commit of a change to what a node should be on (`request_sync`, at most one message
waiting), by the reconciler while attachments are unconfirmed, and by beat every
FABRIC_SYNC_SECONDS with `full`.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import redis
from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.dispatch import receiver

from core import clock
from core.redis_connection import redis_client
from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
from fleet import lifecycle
from fleet.models import GPU, NetworkAttachment, SegmentKind, TenantNetwork
from fleet.networks import NodeOnManager, idle_membership, ports_to_change, read_as, verdicts
from fleet.services.network_attachments import Readback, record_readback
from fleet.services.tenant_networks import release_finished_networks
from fleet.signals import node_transitioned
from reservations.services.networks import let_go_of_drifted_nodes
from workflows.fabric_managers.base import ISOLATED, FabricDriver, FabricRefused, FabricUnavailable, Segment

log = logging.getLogger(__name__)

MANAGERS_AT_ONCE = 8
PASSES = 3  # a sync goes round again while attachments changed under it, at most this often
# The first of pg_try_advisory_lock's two int keys: a namespace of this module's own; the second is the fabric's index.
LOCK_NAMESPACE = 0x66616272  # "fabr"
WAITING = "gpufleet:fabric-sync-waiting"
TASK = "workflows.tasks.sync_fabrics"


# What _members reads of an attachment, its node and its wanted network (a field left out here
# would be read with a query per row).
MEMBER_FIELDS = (
    "changed_at",
    "confirmed",
    "isolated",
    "node__name",
    "node__state",
    "node__ethernet_switch",
    "node__ethernet_port",
    "node__hca_guids",
    "node__rack__name",
    "node__rack__pod__name",
    "wanted__fabric",
    "wanted__kind",
    "wanted__vlan",
    "wanted__segment",
    "wanted__partition",
)


@dataclass(frozen=True)
class _Member:
    """One attachment as a sync acts on it."""

    attachment_id: int
    changed_at: datetime
    node_id: int
    node_name: str
    serving: bool
    manager: str
    ports: tuple[str, ...]
    wanted: Segment | None
    was_confirmed: bool


def sync_fabrics(*, drivers: Mapping[str, FabricDriver], full: bool) -> dict:
    """Sync every fabric that has a driver; returns figures per fabric ("busy" where another sync
    holds it), the nodes let go, the tenant networks released, and under "settled" the ids of the
    nodes whose every membership is now confirmed (their workflows may go on)."""
    figures: dict[str, object] = {}
    let_go: dict[int, str] = {}
    settled: list[int] = []
    for fabric in FABRICS:
        if fabric not in drivers:
            continue
        with _fabric_lock(fabric) as held:
            if not held:
                figures[fabric] = "busy"
                continue
            figures[fabric] = _sync_fabric(fabric, drivers[fabric], full=full, let_go=let_go, settled=settled)
    figures["nodes let go"] = let_go_of_drifted_nodes(let_go) if let_go else 0
    figures["settled"] = settled
    figures["networks released"] = release_finished_networks()
    return figures


@contextmanager
def _fabric_lock(fabric: str) -> Iterator[bool]:
    """The fabric's session advisory lock, if no one else holds it; held outside any transaction."""
    key = (LOCK_NAMESPACE, FABRICS.index(fabric))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        (held,) = cursor.fetchone()
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def _sync_fabric(fabric: str, driver: FabricDriver, *, full: bool, let_go: dict[int, str], settled: list[int]) -> dict:
    assert not connection.in_atomic_block, "a sync calls managers: never inside a transaction"
    idle = idle_membership(fabric, provisioning_vlan=settings.PROVISIONING_VLAN)
    figures = {"attachments": 0, "managers": 0, "ports changed": 0, "confirmed": 0, "problems": 0, "drift repaired": 0}
    for done in range(PASSES):
        began = clock.now()
        by_manager = _members(fabric, full=full and done == 0)
        with ThreadPoolExecutor(max_workers=MANAGERS_AT_ONCE) as pool:
            results = list(pool.map(lambda item: _sync_manager(driver, fabric, idle, *item), by_manager.items()))
        readbacks = [readback for each, _ in results for readback in each]
        members = {m.attachment_id: m for ms in by_manager.values() for m in ms}
        recorded = record_readback(fabric=fabric, readbacks=readbacks)
        settled += recorded.settled
        for readback in readbacks:
            member = members[readback.attachment_id]
            if member.serving and member.wanted is not None and member.node_id in recorded.not_put_back:
                where = ", ".join(f"{port} found on {segment or 'none'}" for port, segment in readback.drifted)
                why = readback.problem or f"{fabric}: read back {readback.found!r}"
                let_go[member.node_id] = f"{member.node_name} off its {fabric} network ({where}), not put back: {why}"
        figures["attachments"] += len(readbacks)
        figures["managers"] += len(by_manager)
        figures["ports changed"] += sum(changed for _, changed in results)
        figures["confirmed"] += sum(r.confirmed for r in readbacks)
        figures["problems"] += sum(bool(r.problem) for r in readbacks)
        figures["drift repaired"] += sum(bool(r.drifted) and r.confirmed for r in readbacks)
        if not NetworkAttachment.objects.filter(fabric=fabric, confirmed=False, changed_at__gt=began).exists():
            break
    return figures


def _members(fabric: str, *, full: bool) -> dict[str, list[_Member]]:
    """The attachments of `fabric` to act on (unconfirmed; `full`: all), by manager."""
    attachments = (
        NetworkAttachment.objects.filter(fabric=fabric)
        .select_related("node__rack__pod", "wanted")
        .only(*MEMBER_FIELDS)  # a node's row is wide, and a sync may read thousands
    )
    if not full:
        attachments = attachments.filter(confirmed=False)
    rows = list(attachments.order_by("pk"))
    gpus: dict[int, list[str]] = defaultdict(list)
    if fabric == NVLINK:
        found = GPU.objects.filter(node_id__in=[row.node_id for row in rows]).order_by("node_id", "index")
        for node_id, uuid in found.values_list("node_id", "uuid"):
            gpus[node_id].append(uuid)
    by_manager: dict[str, list[_Member]] = defaultdict(list)
    for row in rows:
        node = row.node
        ports: tuple[str, ...]
        if fabric == ETHERNET:
            manager, ports = node.ethernet_switch, (node.ethernet_port,)
        elif fabric == INFINIBAND:
            manager, ports = node.rack.pod.name, tuple(node.hca_guids)
        else:
            manager, ports = node.rack.name, tuple(gpus[node.pk])
        if not manager or not all(ports):
            continue  # enrolled without this fabric's ports: nothing a manager could be asked
        by_manager[manager].append(
            _Member(
                attachment_id=row.pk,
                changed_at=row.changed_at,
                node_id=node.pk,
                node_name=node.name,
                serving=node.state in lifecycle.SERVING_STATES,
                manager=manager,
                ports=ports,
                wanted=_segment(row.wanted) if row.wanted is not None else ISOLATED if row.isolated else None,
                was_confirmed=row.confirmed,
            )
        )
    return by_manager


def _segment(network: TenantNetwork) -> Segment:
    return Segment(network.value, vni=network.segment if network.kind == SegmentKind.VXLAN else None)


def _sync_manager(
    driver: FabricDriver, fabric: str, idle: str, manager: str, members: Sequence[_Member]
) -> tuple[list[Readback], int]:
    """One manager: read its ports, apply what differs in one batch, read back. Each attachment's
    read-back, and how many ports were changed. In a thread: no database."""
    nodes = [
        NodeOnManager(m.attachment_id, m.ports, m.wanted.membership if m.wanted is not None else None, m.was_confirmed)
        for m in members
    ]
    ports = [port for m in members for port in m.ports]
    try:
        before = driver.read(manager, ports)
    except (FabricUnavailable, FabricRefused) as error:
        problem = f"{fabric}: {manager}: {error}"
        return [
            Readback(m.attachment_id, m.changed_at, found=None, confirmed=False, problem=problem) for m in members
        ], 0
    change = ports_to_change(nodes, before, idle=idle)
    segments = {m.wanted.membership: m.wanted for m in members if m.wanted is not None}
    after, problem = before, ""
    if change:
        try:
            driver.apply(
                manager, {port: segments[wanted] if wanted is not None else None for port, wanted in change.items()}
            )
            after = driver.read(manager, ports)
        except (FabricUnavailable, FabricRefused) as error:
            problem = f"{fabric}: {manager}: {error}"
    readbacks = []
    for member, verdict in zip(members, verdicts(nodes, before, after, idle=idle), strict=True):
        changed = any(port in change for port in member.ports)
        if changed and problem:
            # What the failed change left is not known: what was found stands, and the node is unsure.
            found, confirmed, why = None, False, problem
        else:
            found, confirmed = verdict.found, verdict.confirmed
            wanted = member.wanted.membership if member.wanted is not None else idle
            why = (
                ""
                if confirmed
                else f"{fabric}: {manager}: read back {read_as(member.ports, after) or 'none'}, not {wanted or 'none'}"
            )
        readbacks.append(
            Readback(
                member.attachment_id,
                member.changed_at,
                found=found,
                confirmed=confirmed,
                problem=why,
                drifted=verdict.drifted,
            )
        )
    return readbacks, len(change)


# -- sending syncs ---------------------------------------------------------------------------------


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis_client(url, socket_connect_timeout=2, socket_timeout=5)


def request_sync() -> bool:
    """Send a sync of what is unconfirmed, unless one is waiting already (workflows/triggers.py's
    reasoning: a backlog must not pile up duplicates). Whether one was sent."""
    marks = _redis(settings.CELERY_BROKER_URL)
    if not marks.set(WAITING, 1, nx=True, ex=max(1, round(settings.WORKER_SWEEP_EXPIRES))):
        return False
    try:
        current_app.send_task(TASK, kwargs={"full": False}, expires=settings.WORKER_SWEEP_EXPIRES)
    except Exception:
        marks.delete(WAITING)  # not sent: the next change or the reconciler must be free to send it
        raise
    return True


def sync_picked_up() -> None:
    """The waiting sync was picked up: whatever changes from now on is sent again."""
    _redis(settings.CELERY_BROKER_URL).delete(WAITING)


@receiver(node_transitioned, dispatch_uid="workflows.fabric_sync.take_off_tenant_networks")
def take_off_tenant_networks(sender, *, from_state, to_state, **kwargs):
    """A node that stops serving was taken off its tenant's networks, and one quarantined or put in
    maintenance isolated (fleet.services.transitions): sync once that commits."""
    stops_serving = from_state in lifecycle.SERVING_STATES and to_state not in lifecycle.SERVING_STATES
    if stops_serving or (to_state in lifecycle.ISOLATED_STATES and from_state not in lifecycle.ISOLATED_STATES):
        transaction.on_commit(request_sync, robust=True)
