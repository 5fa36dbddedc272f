"""Each node's place on the fabrics: what it should be on (a serving node joins its reservation's
networks at the end of provisioning; leaving service takes it off them), what the fabrics' managers
were read back holding (workflows/fabric_sync.py records it here), and the hold on a node whose
removal from a tenant's networks is not confirmed yet.

An attachment's `changed_at` is the version of its `wanted`: a sync records a read-back as
confirming only if `wanted` is still what the sync read before it called the manager.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
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
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(pk=node_id, state__in=lifecycle.SERVING_STATES).first()
        if node is None or any(n is not None and n.reservation_id != node.reservation_id for n in networks.values()):
            return 0
        changed = 0
        for fabric, network in networks.items():
            wanted_id = network.pk if network is not None else None
            changed += (
                NetworkAttachment.objects.filter(node_id=node_id, fabric=fabric)
                .exclude(wanted_id=wanted_id)
                .update(wanted_id=wanted_id, confirmed=False, changed_at=Now())
            )
        return changed


def forget_tenant_networks(*, node_id: int) -> int:
    """Take the node off every tenant's network (in the transaction of the transition that ends its
    service): unconfirmed, and so held (`hold_reasons`), until a sync reads its removal back."""
    return NetworkAttachment.objects.filter(node_id=node_id, wanted__isnull=False).update(
        wanted=None, confirmed=False, changed_at=Now()
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
    newly_confirmed: set[int] = set()
    with transaction.atomic():
        rows = list(
            NetworkAttachment.objects.select_for_update(of=("self",))
            .select_related("node")
            .filter(pk__in=by_id)
            .order_by("pk")
        )
        for row in rows:
            readback = by_id[row.pk]
            current = row.changed_at == readback.changed_at
            was_confirmed = row.confirmed
            last_right = (
                row.checked_at if was_confirmed else None
            )  # the read-back before, which found it as it should be
            row.problem = readback.problem
            if readback.found is not None:
                row.found, row.checked_at = readback.found, Now()
                row.confirmed = current and readback.confirmed
            else:  # not read, or a change failed: unsure if it drifted or changed since, else as it stands
                row.confirmed = row.confirmed and current and not readback.drifted
            if row.confirmed and not was_confirmed:
                newly_confirmed.add(row.node_id)
            if readback.drifted and row.confirmed:
                where = ", ".join(f"{port} found on {segment or 'none'}" for port, segment in readback.drifted)
                audits.append(
                    _audit_row(
                        row.node,
                        AuditOnlyEvent.FABRIC_DRIFT_REPAIRED,
                        actor=actor,
                        reason=f"{fabric}: {where}",
                        detail={
                            "fabric": fabric,
                            "ports": [{"port": port, "found": segment} for port, segment in readback.drifted],
                            "put_back_on": row.found,
                            **({"since": last_right.isoformat()} if last_right else {}),
                        },
                    )
                )
            elif readback.drifted and current:
                not_put_back.append(row.node_id)
        NetworkAttachment.objects.bulk_update(rows, ["found", "checked_at", "confirmed", "problem"])
        settled = _networks_confirmed(newly_confirmed, actor=actor)
        AuditEvent.objects.bulk_create(audits + settled)
    return Recorded(not_put_back=not_put_back, settled=[row.node_id for row in settled])


def _networks_confirmed(node_ids: Iterable[int], *, actor: str) -> list[AuditEvent]:
    """An audit row for each node whose every attachment is confirmed, naming what each was read on."""
    node_ids = set(node_ids)
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
    nodes = Node.objects.in_bulk(found)
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
        step__in=[StepName.WAIT_FOR_TENANT_NETWORKS, StepName.LEAVE_TENANT_NETWORKS],
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
    return Q(wanted__isnull=True, confirmed=False) & (~_idle_found() | Q(checked_at__lt=F("changed_at")))


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
