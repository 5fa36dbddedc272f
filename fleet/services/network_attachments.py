"""Each node's place on the fabrics: what it should be on (a serving node joins its reservation's
networks at the end of provisioning; leaving service takes it off them), what the fabrics' managers
were read back holding (workflows/fabric_sync.py records it here), and the hold on a node whose
removal from a tenant's networks is not confirmed yet.

An attachment's `changed_at` is the version of its `wanted`: a sync records a read-back as
confirming only if `wanted` is still what the sync read before it called the manager.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import BigIntegerField, Case, F, Q, QuerySet, Value, When
from django.db.models.functions import Now

from core.topology import ETHERNET
from fleet import leases, lifecycle
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node, TenantNetwork
from fleet.workflow_steps import StepName

HOLD = "network_cleanup_pending"
SYNC_ACTOR = "system:fabric-sync"


def want_tenant_networks(*, node_id: int, networks: Mapping[str, TenantNetwork | None]) -> int:
    """Put the node on these networks (by fabric; None: on no tenant's): each attachment whose
    `wanted` changes is unconfirmed until a sync reads it back. Only while the node serves the
    reservation the networks are for (a worker whose tenancy ended meanwhile changes nothing).
    Returns how many attachments changed."""
    if not networks:
        return 0
    wanted = {fabric: network.pk if network is not None else None for fabric, network in networks.items()}
    differs = Q()
    for fabric, wanted_id in wanted.items():
        differs |= Q(fabric=fabric) & ~Q(wanted_id=wanted_id)
    with transaction.atomic():
        serving = Node.objects.select_for_update().filter(pk=node_id, state__in=lifecycle.SERVING_STATES)
        reservation_ids = list(serving.values_list("reservation_id", flat=True))
        if not reservation_ids or any(
            n is not None and n.reservation_id != reservation_ids[0] for n in networks.values()
        ):
            return 0
        # One statement for every fabric: each attachment takes its own fabric's network.
        return NetworkAttachment.objects.filter(differs, node_id=node_id).update(
            wanted_id=Case(
                *(When(fabric=fabric, then=Value(wanted_id)) for fabric, wanted_id in wanted.items()),
                output_field=BigIntegerField(),
            ),
            confirmed=False,
            changed_at=Now(),
            isolated=False,  # a port joining a tenant's network is in a VLAN again
        )


def forget_tenant_networks(*, node_id: int) -> int:
    """Take the node off every tenant's network (in the transaction of the transition that ends its
    service), and its Ethernet port off every VLAN (`isolate`): unconfirmed, and so held
    (`hold_reasons`), until a sync reads its removal back."""
    forgotten = NetworkAttachment.objects.filter(node_id=node_id, wanted__isnull=False).update(
        wanted=None, confirmed=False, changed_at=Now()
    )
    isolate(node_id=node_id)
    return forgotten


def isolate(*, node_id: int) -> int:
    """Put the node's Ethernet port on no VLAN at all: its OS may be its last tenant's (released,
    not yet rebooted by the wipe; quarantined; in maintenance), which must reach neither that
    tenant nor the provisioning network, where other nodes' agents listen."""
    return NetworkAttachment.objects.filter(node_id=node_id, fabric=ETHERNET, isolated=False).update(
        isolated=True, confirmed=False, changed_at=Now()
    )


def join_provisioning_network(*, node_id: int) -> int:
    """Put an isolated node's Ethernet port back on the provisioning VLAN: the wipe does once the
    node runs the service image, whose agent the control plane reaches there."""
    return NetworkAttachment.objects.filter(node_id=node_id, fabric=ETHERNET, isolated=True).update(
        isolated=False, confirmed=False, changed_at=Now()
    )


@dataclass(frozen=True)
class Readback:
    """What one sync learnt of one attachment. `changed_at`: the version of `wanted` the sync acted
    on. `found` None: the manager was not read (its problem says why), what was found stands."""

    attachment_id: int
    changed_at: datetime
    found: str | None
    confirmed: bool
    problem: str = ""
    drifted: tuple[tuple[str, str], ...] = field(default=())  # (port, the segment it was found on)


@dataclass(frozen=True)
class Recorded:
    not_put_back: list[int]  # nodes found drifted whose change back failed
    settled: list[int]  # nodes whose every attachment is now confirmed, that were not before


def record_readback(*, fabric: str, readbacks: Sequence[Readback], actor: str = SYNC_ACTOR) -> Recorded:
    """Record a sync of one fabric, in one transaction: each attachment's found, confirmed, checked_at
    and problem; `fabric_drift_repaired` for drift put back (naming the fabric, each port and the
    segment it was found on), and `networks_confirmed` for each node whose every attachment is now
    confirmed. A read-back of an attachment whose `wanted` changed since confirms nothing."""
    if not readbacks:
        return Recorded(not_put_back=[], settled=[])
    by_id = {readback.attachment_id: readback for readback in readbacks}
    not_put_back = []
    audits: list[AuditEvent] = []
    newly_confirmed: dict[int, Node] = {}
    # Rows written alike are written by one UPDATE: a sync's rows share a few outcomes (a network's
    # membership, a manager's problem), and a statement per outcome is far cheaper than one per row.
    # The key: (read, found, confirmed, problem); a row not read keeps its found and checked_at.
    outcomes: dict[tuple[bool, str, bool, str], list[int]] = defaultdict(list)
    with transaction.atomic():
        for row in _locked_with_their_nodes(by_id):
            readback = by_id[row.pk]
            current = row.changed_at == readback.changed_at
            was_confirmed = row.confirmed
            # The read-back before, which found it as it should be: since when a drift can have lasted.
            last_right = row.checked_at if was_confirmed else None
            if readback.found is not None:
                row.found = readback.found
                row.confirmed = current and readback.confirmed
            else:  # not read, or a change failed: unsure if it drifted or changed since, else as it stands
                row.confirmed = row.confirmed and current and not readback.drifted
            if row.confirmed and not was_confirmed:
                newly_confirmed[row.node_id] = row.node
            outcome = (readback.found is not None, readback.found or "", row.confirmed, readback.problem)
            outcomes[outcome].append(row.pk)
            if readback.drifted and row.confirmed:
                audits.append(_drift_repaired(row, readback, fabric=fabric, since=last_right, actor=actor))
            elif readback.drifted and current:
                not_put_back.append(row.node_id)
        for (read, found, confirmed, problem), ids in outcomes.items():
            checked = {"found": found, "checked_at": Now()} if read else {}
            NetworkAttachment.objects.filter(pk__in=ids).update(confirmed=confirmed, problem=problem, **checked)
        settled = _networks_confirmed(newly_confirmed, actor=actor)
        AuditEvent.objects.bulk_create(audits + settled)
    return Recorded(not_put_back=not_put_back, settled=[row.node_id for row in settled])


def _locked_with_their_nodes(attachment_ids: Iterable[int]) -> list[NetworkAttachment]:
    """The attachments locked, their nodes first, in the order transitions take them: an audit row
    names its node's state, which no transition may change until the caller commits."""
    node_ids = NetworkAttachment.objects.filter(pk__in=attachment_ids).values("node_id")
    list(Node.objects.select_for_update().filter(pk__in=node_ids).order_by("pk").values_list("pk", flat=True))
    return list(
        NetworkAttachment.objects.select_for_update(of=("self",))
        .select_related("node")
        .only("changed_at", "confirmed", "checked_at", "found", "node__state")  # an audit row's node
        .filter(pk__in=attachment_ids)
        .order_by("pk")
    )


def _drift_repaired(
    row: NetworkAttachment, readback: Readback, *, fabric: str, since: datetime | None, actor: str
) -> AuditEvent:
    """`fabric_drift_repaired`, naming the fabric, each port, the segment it was found on, where it
    was put back, and since when the drift can have lasted (the read-back before, which found it right)."""
    where = ", ".join(f"{port} found on {segment or 'none'}" for port, segment in readback.drifted)
    return _audit_row(
        row.node,
        AuditOnlyEvent.FABRIC_DRIFT_REPAIRED,
        actor=actor,
        reason=f"{fabric}: {where}",
        detail={
            "fabric": fabric,
            "ports": [{"port": port, "found": segment} for port, segment in readback.drifted],
            "put_back_on": row.found,
            **({"since": since.isoformat()} if since else {}),
        },
    )


def _networks_confirmed(nodes: Mapping[int, Node], *, actor: str) -> list[AuditEvent]:
    """An audit row for each node (by id) whose every attachment is confirmed, naming what each was read on."""
    node_ids = set(nodes)
    if not node_ids:
        return []
    unsure = set(
        NetworkAttachment.objects.filter(node_id__in=node_ids, confirmed=False).values_list("node_id", flat=True)
    )
    found: dict[int, dict[str, str]] = {}
    for node_id, fabric, value in NetworkAttachment.objects.filter(node_id__in=node_ids - unsure).values_list(
        "node_id", "fabric", "found"
    ):
        found.setdefault(node_id, {})[fabric] = value
    return [
        _audit_row(
            nodes[node_id],
            AuditOnlyEvent.NETWORKS_CONFIRMED,
            actor=actor,
            reason=", ".join(f"{fabric} {value or 'none'}" for fabric, value in sorted(memberships.items())),
            detail={"memberships": memberships},
        )
        for node_id, memberships in found.items()
    ]


def wake_waiting(node_ids: Iterable[int]) -> list[int]:
    """End the park of those nodes that wait at a step for their networks' read-back, which a
    sync has just confirmed: their workflows go on now, not at the park's recheck. The ids woken."""
    waiting = Node.objects.filter(
        pk__in=list(node_ids),
        lease_owner=leases.WAITING_ON_HARDWARE,
        step__in=[
            StepName.WAIT_FOR_TENANT_NETWORKS,
            StepName.LEAVE_TENANT_NETWORKS,
            StepName.JOIN_PROVISIONING_NETWORK,
        ],
    )
    woken = list(waiting.values_list("pk", flat=True))
    waiting.filter(pk__in=woken).update(lease_expires_at=Now())
    return woken


def _audit_row(node: Node, event: AuditOnlyEvent, *, actor: str, reason: str, detail: dict) -> AuditEvent:
    # fleet.services.transitions has the same; it calls forget_tenant_networks, so not imported here.
    return AuditEvent(
        node=node, actor=actor, event=event, from_state=node.state, to_state=node.state, reason=reason, detail=detail
    )


def _idle_found() -> Q:
    """A read-back of no tenant's network: Ethernet's provisioning VLAN, or nothing."""
    return Q(found="") | Q(fabric=ETHERNET, found=str(settings.PROVISIONING_VLAN))


def _removal_pending() -> Q:
    """Attachments that may still hold a node on a tenant's network: on none by `wanted`, not
    confirmed so, and either read back on one last time, or taken off one since that read."""
    # An Ethernet port going from isolated back to the provisioning VLAN leaves no tenant's network.
    # Never read (checked_at null) compares as nothing; said outright, it lets the planner see that
    # few rows match, and use network_attachment_owed_idx.
    taken_off_since = Q(checked_at__isnull=False, checked_at__lt=F("changed_at")) & ~Q(fabric=ETHERNET, isolated=False)
    return Q(wanted__isnull=True, confirmed=False) & (~_idle_found() | taken_off_since)


def hold_reasons(node_ids: Iterable[int] | None = None) -> dict[int, str]:
    """The nodes held out of placement because their removal from a tenant's networks is not
    confirmed, each with its reason: `network_cleanup_pending: <fabric>: <problem or where it was
    found>`, a fabric each."""
    pending = NetworkAttachment.objects.filter(_removal_pending())
    if node_ids is not None:
        pending = pending.filter(node_id__in=list(node_ids))
    reasons: dict[int, list[str]] = {}
    for node_id, fabric, found, problem in pending.order_by("node_id", "fabric").values_list(
        "node_id", "fabric", "found", "problem"
    ):
        # A problem names its fabric already ("<fabric>: <manager>: ...").
        why = problem or f"{fabric}: {f'found on {found}' if found else 'removal not read back yet'}"
        reasons.setdefault(node_id, []).append(why)
    return {node_id: f"{HOLD}: {'; '.join(each)}" for node_id, each in reasons.items()}


def held_source() -> QuerySet:
    """The ids of the nodes hold_reasons names (some maybe twice), as a one-column query: what
    placement reads beside the holds, in the same round trip, where it needs no reasons."""
    return NetworkAttachment.objects.filter(_removal_pending()).order_by().values_list("node_id")


def removal_pending(*, node_id: int) -> bool:
    """Whether the node may still be on a tenant's network (`hold_reasons`), or is wanted on one."""
    return NetworkAttachment.objects.filter(Q(wanted__isnull=False) | _removal_pending(), node_id=node_id).exists()


def syncs_owed() -> bool:
    """Whether a node waits on a sync: to join its networks, or to have its removal read back.
    (Attachments never read nor ever wanted wait for beat's full sync alone.)"""
    return (
        NetworkAttachment.objects.filter(confirmed=False).filter(Q(wanted__isnull=False) | _removal_pending()).exists()
    )


def networks_confirmed(*, node_id: int) -> bool:
    """Whether every attachment of the node was read back as what it should be."""
    return not NetworkAttachment.objects.filter(node_id=node_id, confirmed=False).exists()


def network_problems(*, node_id: int) -> list[str]:
    """Why the node's unconfirmed attachments are not confirmed yet, where a sync said: "<fabric>: <problem>"."""
    unsure = NetworkAttachment.objects.filter(node_id=node_id, confirmed=False).exclude(problem="")
    return list(unsure.order_by("fabric").values_list("problem", flat=True))
