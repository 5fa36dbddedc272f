"""Rolling a firmware baseline out to the fleet: which nodes to update next, and how a rollout stands.

Pure: no Django. A node runs its class's baseline once an inspection has checked it against the
baseline as it stands (fleet/firmware.py: every inspection compares and repairs), so a rollout
updates a node by sending it through inspection again (lifecycle `firmware_update`), and knows it
updated by the `firmware_checked` row that inspection writes (`runs_baseline`).

Updating a node takes it out of service for a whole inspection, and a bad release would fail every
node it reaches. So, with the same blast-radius thinking as remediation's cap: at most
`per_pod_cap` nodes of a pod and `batch_size` in all are updated at once; a batch starts only once
the last one has finished, so its failures are seen before more nodes are taken; and the first
failure pauses the rollout for an operator to look.

Nodes in use are never taken. Every release is followed by a wipe and an inspection, which brings a
node to its baseline by itself: the rollout only counts those nodes (`at_next_handoff`) until that
inspection has passed. So are nodes on their way back from a tenant and nodes not yet
inspected. A node a booking holds now or soon is left for its tenant, and one a remediation ladder
is repairing for the ladder's verdict.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import DomainError
from fleet.firmware import Baseline
from fleet.lifecycle import Event, State

DEFAULT_BATCH_SIZE = 4
DEFAULT_PER_POD_CAP = 1


class RolloutStatus(enum.StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


# A rollout under way: at most one per baseline (a partial unique constraint too).
UNDER_WAY = frozenset({RolloutStatus.RUNNING, RolloutStatus.PAUSED})
FINISHED = frozenset({RolloutStatus.COMPLETED, RolloutStatus.CANCELLED})


class NodeStatus(enum.StrEnum):
    PENDING = "pending"  # to be updated: in a later batch, or once back in service
    UPDATING = "updating"  # the rollout sent it to inspection; the inspection's outcome decides
    UPDATED = "updated"  # runs the baseline
    FAILED = "failed"  # its update failed: quarantined by the inspection that was to update it
    AT_NEXT_HANDOFF = "at_next_handoff"  # in use, or on its way: its next inspection brings the baseline


# A node's update has ended: it has a finish time exactly then (a CHECK constraint too).
DONE = frozenset({NodeStatus.UPDATED, NodeStatus.FAILED})

# Where a node's next inspection comes by itself: in use (after its release and wipe), on its way back
# from a tenant, or never inspected yet.
ON_ITS_WAY = frozenset({State.PROVISIONING, State.ACTIVE, State.WIPING, State.INSPECTING, State.ENROLLED})
OUT_OF_SERVICE = frozenset({State.QUARANTINED, State.MAINTENANCE})


class InvalidLimits(DomainError, ValueError):
    pass


@dataclass(frozen=True)
class Limits:
    batch_size: int  # nodes updated at once, in all
    per_pod_cap: int  # nodes of one pod updated at once

    def __post_init__(self) -> None:
        for name in ("batch_size", "per_pod_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidLimits(f"{name} must be a whole number of at least 1, not {value!r}")


@dataclass(frozen=True)
class RolloutNode:
    """A node of the baseline's class as a rollout sees it."""

    name: str
    pod: str
    state: State
    status: NodeStatus  # in the rollout, as last settled
    runs_baseline: bool  # an inspection has checked it against the baseline as it stands
    quarantine_reason: str = ""
    held: bool = False  # a booking holds it now or soon: left for its tenant
    under_repair: bool = False  # a remediation ladder is repairing it


@dataclass(frozen=True)
class Settled:
    status: NodeStatus
    reason: str


def settle(node: RolloutNode) -> Settled:
    """The node's status in the rollout now, from where it stands and whether it runs the baseline.

    A node the rollout sent to inspection is updated once it comes out of it running the baseline,
    and failed if the inspection quarantined it, whatever for: a release can break diagnostics or
    attestation as well as its own flash. A node in use gets the baseline from the inspection after
    its release, which the rollout does not drive: it is updated once that inspection has passed;
    only a firmware_drift quarantine says its update failed, any other (a tenant's implant, a GPU
    fault) leaves it out of service, as it would without a rollout. An updated node stays so, in
    or out of service, until the baseline changes.
    """
    state = node.state
    if node.status is NodeStatus.UPDATING:
        if state is State.INSPECTING:
            return Settled(NodeStatus.UPDATING, "")
        if state is State.QUARANTINED:
            return Settled(NodeStatus.FAILED, node.quarantine_reason)
        if node.runs_baseline:
            return Settled(NodeStatus.UPDATED, "inspected: runs the baseline")
        return Settled(
            NodeStatus.FAILED, f"came out of its inspection {state} without a firmware check against the baseline"
        )
    if node.runs_baseline and (node.status is NodeStatus.UPDATED or state not in {State.INSPECTING, State.QUARANTINED}):
        return Settled(NodeStatus.UPDATED, "runs the baseline")
    if node.status is NodeStatus.AT_NEXT_HANDOFF and _quarantined_for_firmware(node):
        return Settled(NodeStatus.FAILED, node.quarantine_reason)
    if node.status is NodeStatus.FAILED and state in OUT_OF_SERVICE:
        return Settled(NodeStatus.FAILED, node.quarantine_reason or state.value)
    if state in ON_ITS_WAY:
        return Settled(NodeStatus.AT_NEXT_HANDOFF, f"{state.value}: its next inspection brings the baseline")
    if state in OUT_OF_SERVICE:
        return Settled(NodeStatus.PENDING, f"{state.value}: out of service")
    if node.held:
        return Settled(NodeStatus.PENDING, "a reservation holds it from now or soon")
    if node.under_repair:
        return Settled(NodeStatus.PENDING, "a remediation ladder is repairing it")
    return Settled(NodeStatus.PENDING, "")


def _quarantined_for_firmware(node: RolloutNode) -> bool:
    return node.state is State.QUARANTINED and node.quarantine_reason.partition(":")[0] == Event.FIRMWARE_DRIFT


def runs_baseline(baseline: Baseline, last_check: Mapping[str, Any] | None) -> bool:
    """Whether a node runs the baseline as it stands, by the facts of its last firmware check against
    it since its last change (fleet.firmware.Found.facts). Such a check found no drift, BIOS
    attributes and Secure Boot included (which the facts do not list); the facts must also show every
    release the baseline expects, as some component's version and digest: a check that read the
    baseline just before an edit committed is given away by its older releases."""
    if last_check is None:
        return False
    found = {(c["version"], c["digest"]) for c in last_check["components"].values()}
    return all((expected.version, expected.sha256) in found for expected in baseline.components.values())


def has_room(pod: str, updating_pods: Iterable[str], limits: Limits) -> bool:
    """Whether one more node of `pod` may be updated beside those updating (their pods, one each)."""
    updating = Counter(updating_pods)
    return updating.total() < limits.batch_size and updating[pod] < limits.per_pod_cap


def next_batch(nodes: Iterable[RolloutNode], limits: Limits) -> list[RolloutNode]:
    """The nodes to update now: none while a batch is under way; else available pending nodes that
    nothing holds, in name order, as many as the batch size and each pod's cap allow."""
    nodes = list(nodes)
    if any(n.status is NodeStatus.UPDATING for n in nodes):
        return []
    chosen: list[RolloutNode] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if _may_take(node) and has_room(node.pod, (c.pod for c in chosen), limits):
            chosen.append(node)
    return chosen


def _may_take(node: RolloutNode) -> bool:
    return (
        node.status is NodeStatus.PENDING
        and node.state is State.AVAILABLE
        and not node.runs_baseline
        and not node.held
        and not node.under_repair
    )


def complete(nodes: Iterable[RolloutNode]) -> bool:
    """Every node runs the baseline or is out of service (and nothing is being updated): whoever
    brings an out-of-service node back sends it through a wipe and an inspection, which updates it."""
    return all(
        n.status is NodeStatus.UPDATED or (n.status is not NodeStatus.UPDATING and n.state in OUT_OF_SERVICE)
        for n in nodes
    )


def first_failure(before: dict[str, NodeStatus], after: dict[str, Settled]) -> str | None:
    """Why to pause: the first node (by name) that failed since the statuses `before`, or None."""
    failed = sorted(
        name
        for name, settled in after.items()
        if settled.status is NodeStatus.FAILED and before.get(name) is not NodeStatus.FAILED
    )
    return f"{failed[0]}: {after[failed[0]].reason}" if failed else None


def describe(counts: Mapping[NodeStatus, int]) -> str:
    """How far a rollout has come, in one line: "12 updated, 2 updating, 1 at next handoff"."""
    shown = [f"{counts[s]} {s.value.replace('_', ' ')}" for s in NodeStatus if counts.get(s)]
    return ", ".join(shown) or "no node of its class"
