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

    def counts_at(self, at: datetime, window: timedelta) -> bool:
        """Whether the incident overlaps the window that ends at `at`."""
        return self.began <= at and (self.ended is None or self.ended > at - window)


@dataclass(frozen=True)
class Breach:
    """A window, ending `at`, that overlapped more incidents than the cap: fleet-wide, or in `pod`."""

    pod: str | None
    at: datetime
    limit: int
    incidents: tuple[Incident, ...]


def refusal(cap: Cap, counted: Iterable[Incident], *, pod: str, at: datetime) -> str | None:
    """Why one more incident in `pod` at `at` would break the cap, or None to let it act.
    `counted` may hold incidents outside the window: only those that overlap it count."""
    in_window = [incident for incident in counted if incident.counts_at(at, cap.window)]
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
    or in one pod: one for each incident that began into a window already full."""
    ordered = sorted(incidents, key=lambda incident: (incident.began, incident.remediation))
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
