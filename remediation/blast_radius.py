"""The blast-radius cap: the one definition of what counts against it, used by the decision to act
(remediation.services, under the cap's advisory lock) and by the check of the whole history
(console.invariants, `manage.py check_invariants`).

Pure: the standard library only.

An *incident* is one automatic remediation of one node: a ladder that climbs repair rungs (GPU
reset, reboot, power cycle) until the GPU is healthy again or the node is quarantined, or a
quarantine at once. It counts once however many rungs it climbs, from the moment it was let act
until its last action ended; while its ladder still climbs, it counts up to now. A new incident
on a node counts again, even when an earlier one on the same node (since returned to service)
still counts in the window.

The cap holds when no window of `Cap.window` overlaps more than `Cap.fleet` incidents, nor more
than `Cap.pod` incidents in one pod. The decision lets an incident act only while the window
ending at that moment holds fewer than the cap. That is enough for every window: the incidents
that overlap any one window all overlap the window that ends when the latest of them began, and
that is the window its decision counted. `breaches` checks a history in the same way.

What a tenant's own node says of itself during its tenancy (remediation/rules/self_reports.py; and
the tenant's reports of a broken node, reservations.services.report_node) never counts against the
cap: it spends that tenant's `Budget` instead, counted the same way over the cap's window (an
incident from when it was let act to when it ended, a tenant's report at the moment it was made).
A tenant whose budget is spent can quarantine no more of its nodes on its own word, and never
makes the cap suppress a fault on another tenant's node.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Cap:
    fleet: int
    pod: int
    window: timedelta

    def describe_window(self) -> str:
        return f"{self.window.total_seconds() / 60:g} minutes"


@dataclass(frozen=True)
class Incident:
    remediation: int
    node: str
    pod: str
    began: datetime
    ended: datetime | None = None  # None while its ladder climbs
    tenant: int | None = None  # the tenant whose budget it spent, for a fault its node reported

    def counts_at(self, at: datetime, window: timedelta) -> bool:
        """Whether the incident overlaps the window that ends at `at`."""
        return overlaps(self.began, self.ended, at, window)

    @property
    def capped(self) -> bool:
        return self.tenant is None


def overlaps(began: datetime, ended: datetime | None, at: datetime, window: timedelta) -> bool:
    """Whether a span (open while `ended` is None) overlaps the window that ends at `at`."""
    return began <= at and (ended is None or ended > at - window)


@dataclass(frozen=True)
class Breach:
    """A window, ending `at`, that overlapped more incidents than the cap: fleet-wide, or in `pod`."""

    pod: str | None
    at: datetime
    limit: int
    incidents: tuple[Incident, ...]


def refusal(cap: Cap, counted: Iterable[Incident], *, pod: str, at: datetime) -> str | None:
    """Why one more incident in `pod` at `at` would break the cap, or None to let it act.
    `counted` may hold incidents outside the window, and a tenant's: only the cap's that overlap it count."""
    in_window = [incident for incident in counted if incident.capped and incident.counts_at(at, cap.window)]
    if len(in_window) >= cap.fleet:
        return f"{remediations(len(in_window))} in the last {cap.describe_window()} (cap {cap.fleet})"
    in_pod = sum(1 for incident in in_window if incident.pod == pod)
    if in_pod >= cap.pod:
        return f"{remediations(in_pod)} in pod {pod} in the last {cap.describe_window()} (pod cap {cap.pod})"
    return None


def remediations(count: int) -> str:
    return f"{count} automatic remediation{'' if count == 1 else 's'}"


def breaches(cap: Cap, incidents: Iterable[Incident]) -> Iterator[Breach]:
    """Every window of a history that overlapped more incidents than the cap allows, fleet-wide
    or in one pod: one for each incident that began into a window already full. A tenant's own
    faults are its budget's, not the cap's."""
    capped = (incident for incident in incidents if incident.capped)
    ordered = sorted(capped, key=lambda incident: (incident.began, incident.remediation))
    overlapping: list[Incident] = []
    for latest in ordered:
        # One that does not overlap this window ended too early for any later one.
        overlapping = [incident for incident in overlapping if incident.counts_at(latest.began, cap.window)]
        overlapping.append(latest)
        if len(overlapping) > cap.fleet:
            yield Breach(None, latest.began, cap.fleet, tuple(overlapping))
        in_pod = tuple(incident for incident in overlapping if incident.pod == latest.pod)
        if len(in_pod) > cap.pod:
            yield Breach(latest.pod, latest.began, cap.pod, in_pod)


@dataclass(frozen=True)
class Budget:
    """What a tenant's own nodes may say of themselves: `faults` in any window of `window` (the cap's)."""

    faults: int
    window: timedelta


# The word that starts the reason of a self-reported fault suppressed over its tenant's budget.
TENANT_FAULT_BUDGET = "tenant_fault_budget"


def budget_refusal(budget: Budget, spent: Iterable[tuple[datetime, datetime | None]], *, at: datetime) -> str | None:
    """Why one more fault its own node reports would overspend the tenant's budget at `at`, or None.
    `spent`: the spans (began, ended; ended None while open) of its faults let act, and its reports
    (an instant each); only those that overlap the window count. The reason names no tenant: the
    public listener shows it."""
    in_window = sum(1 for began, ended in spent if overlaps(began, ended, at, budget.window))
    if in_window >= budget.faults:
        faults = f"{in_window} fault{'' if in_window == 1 else 's'}"
        return (
            f"{TENANT_FAULT_BUDGET}: {faults} reported by its tenant's own nodes"
            f" in the last {budget.window.total_seconds() / 60:g} minutes (budget {budget.faults})"
        )
    return None
