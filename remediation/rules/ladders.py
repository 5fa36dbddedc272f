"""The remediation ladders: the rungs each fault climbs, whether and how long a tenant is warned,
what a rung's outcome leads to, and repeat offenders.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from types import MappingProxyType


class Step(enum.StrEnum):
    """A rung of a remediation ladder, weakest first."""

    GPU_RESET = "gpu_reset"  # through the node's agent: the tenant keeps the node and its other GPUs
    REBOOT = "reboot"  # Redfish GracefulRestart, ForceRestart if the OS ignores it
    POWER_CYCLE = "power_cycle"  # Redfish PowerCycle: the GPUs lose power
    QUARANTINE = "quarantine"  # out of service for an operator; a tenant gets a replacement


# The rungs that take the whole node, and so the tenant's work on every GPU, for a while.
NODE_STEPS = frozenset({Step.REBOOT, Step.POWER_CYCLE})


# The rungs that need a GPU to aim at.
GPU_STEPS = frozenset({Step.GPU_RESET})


class Mode(enum.StrEnum):
    ENFORCE = "enforce"
    # Decided and recorded, never acted on: how a new rule earns the operators' trust.
    SHADOW = "shadow"


@dataclass(frozen=True)
class Ladder:
    """What a class of fault calls for: rungs climbed in order until the GPU is healthy again.

    A GPU still unhealthy after the last repair rung is quarantined, whether or not the ladder
    names that rung: a known-faulty GPU is never left in service."""

    steps: tuple[Step, ...]  # () calls for no action
    notify_tenant: bool = False  # tell the node's tenant (webhook node.remediation) before each rung
    # How long a rung that takes the node (NODE_STEPS) waits, once the tenant is told, for the
    # tenant to let go of it; 0 acts at once.
    drain: timedelta = timedelta(0)
    mode: Mode = Mode.ENFORCE

    def after(self, step: Step) -> Step:
        """The rung to climb when `step` did not make the GPU healthy."""
        later = self.steps[self.steps.index(step) + 1 :] if step in self.steps else ()
        return later[0] if later else Step.QUARANTINE


# The ladders, by name; the XID table and the alert rules name one each. Recorded on every
# remediation (its `action`), so renaming one orphans its history: add a new name instead.
LADDERS: Mapping[str, Ladder] = MappingProxyType(
    {
        # Informational: the driver cleaned up after an application, nothing is wrong.
        "none": Ladder(()),
        # The tenant's own job failed on a healthy GPU: they hear of it, nothing else is done.
        "application": Ladder((), notify_tenant=True),
        # A hung GPU: a reset usually clears it; a reboot takes every GPU of the node from the
        # tenant, so they get a quarter of an hour to checkpoint first.
        "gpu_hang": Ladder(
            (Step.GPU_RESET, Step.REBOOT, Step.QUARANTINE), notify_tenant=True, drain=timedelta(minutes=15)
        ),
        # Memory errors the driver contained (or remapped) pending a reset; the handoff's GPU memory
        # wipe and the repeat-offender rule catch memory that keeps failing.
        "gpu_memory": Ladder(
            (Step.GPU_RESET, Step.REBOOT, Step.QUARANTINE), notify_tenant=True, drain=timedelta(minutes=15)
        ),
        # The GPU is lost to the host (off the bus, NVLink down, GSP dead): the tenant's work on it
        # is already gone, so the node is rebooted at once, then power cycled.
        "gpu_lost": Ladder((Step.REBOOT, Step.POWER_CYCLE, Step.QUARANTINE), notify_tenant=True),
        # Hardware that no reset repairs (spare memory rows exhausted, escaped ECC, NVLink5 faults):
        # out of service for an operator and likely an RMA.
        "hardware_failed": Ladder((Step.QUARANTINE,), notify_tenant=True),
    }
)


@dataclass(frozen=True)
class RepeatOffender:
    """A node remediated `count` times within `window` is quarantined for an operator (and likely an
    RMA), whatever its fault's rule says: a GPU that needs a reset every other day is failing."""

    count: int
    window: timedelta


REPEAT_OFFENDER = RepeatOffender(count=3, window=timedelta(days=7))


@dataclass(frozen=True)
class Decision:
    rule: str  # the ladder's name in LADDERS
    step: Step | None  # the rung to climb now; None when nothing is (or is left) to do
    node: str | None
    gpu: int | None
    reason: str  # e.g. "XID 79 on GPU 3: GPU has fallen off the bus"
    mode: Mode = Mode.ENFORCE

    @property
    def ladder(self) -> Ladder:
        return LADDERS[self.rule]


_DONE = {Step.GPU_RESET: "a GPU reset", Step.REBOOT: "a reboot", Step.POWER_CYCLE: "a power cycle"}


def after_step(decision: Decision, *, healthy: bool, why: str = "") -> Decision:
    """What follows a repair rung: nothing if the GPU is healthy again, else the ladder's next
    rung; `why` says what went wrong with the rung, if something did."""
    if decision.step not in _DONE:
        raise ValueError(f"after_step follows a repair rung, not {decision.step}")
    done = _DONE[decision.step]
    if healthy:
        return replace(decision, step=None, reason=f"{decision.reason}; healthy after {done}")
    after = f": {why}" if why else ""
    reason = f"{decision.reason}; still unhealthy after {done}{after}"
    return replace(decision, step=decision.ladder.after(decision.step), reason=reason)


def repeat_offense(decision: Decision, *, earlier: int, rule: RepeatOffender = REPEAT_OFFENDER) -> Decision:
    """`decision` as it stands, or a quarantine if its node was remediated `earlier` times within the
    rule's window and this one makes `rule.count`."""
    if decision.step is None or earlier + 1 < rule.count:
        return decision
    days = rule.window / timedelta(days=1)
    suspect = f"GPU {decision.gpu}" if decision.gpu is not None else "the node"
    offense = f"repeat_offender: remediation {earlier + 1} in {days:g} days, suggested RMA of {suspect}"
    return replace(decision, step=Step.QUARANTINE, reason=f"{offense}; {decision.reason}")
