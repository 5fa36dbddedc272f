"""Reliability figures of automatic remediation: how long a fault takes to mend (MTTR), how often
faults come (MTBI), and how many remediations each day had, by outcome.

Pure: the standard library only, so the definitions can be read and tested without Django.
remediation/selectors.py reads the records; console/pages/selectors/remediations.py adds what only the
reservations tell (when a quarantined node's replacement came up).

An incident is a fault the control plane acted on: a repair rung, or a quarantine. It ends when
the node is healthy again after a repair; when it was quarantined, once the reservation it served
has a replacement up, or at the quarantine itself when it served no one (capacity is out, but
nobody waits). Until then it is open, and has no time to repair yet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta


@dataclass(frozen=True)
class IncidentTimes:
    """One incident: the node and GPU model it struck, and the times its records tell."""

    node: str
    gpu_model: str  # the failing GPU's model; "" when the node has no GPU on record
    fault_at: datetime  # when the alert began firing
    quarantined_at: datetime | None = None
    repaired_at: datetime | None = None  # healthy again after a repair rung
    reservation: int | None = None  # the reservation the node served: a quarantine ends with its replacement
    replacement_up_at: datetime | None = None  # that reservation active again, after the quarantine

    @property
    def ended_at(self) -> datetime | None:
        """When the node was healthy again or replaced; None while the incident is open."""
        if self.repaired_at is not None:
            return self.repaired_at
        if self.quarantined_at is None:  # a repair under way
            return None
        if self.reservation is not None:
            return self.replacement_up_at
        return self.quarantined_at

    @property
    def time_to_repair(self) -> timedelta | None:
        ended = self.ended_at
        return None if ended is None else ended - self.fault_at


@dataclass(frozen=True)
class RepairTimes:
    """Fault to healthy or replaced, over the incidents that have ended."""

    ended: int
    open: int
    mean: timedelta | None  # the MTTR; None when no incident has ended
    median: timedelta | None


def repair_times(incidents: Iterable[IncidentTimes]) -> RepairTimes:
    times = []
    still_open = 0
    for incident in incidents:
        time = incident.time_to_repair
        if time is None:
            still_open += 1
        else:
            times.append(time)
    if not times:
        return RepairTimes(ended=0, open=still_open, mean=None, median=None)
    times.sort()
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    return RepairTimes(ended=len(times), open=still_open, mean=sum(times, timedelta()) / len(times), median=median)


@dataclass(frozen=True)
class NodeMTBI:
    node: str
    incidents: int
    mean_gap: timedelta  # between one incident's fault and the next's


def mtbi_per_node(incidents: Iterable[IncidentTimes]) -> list[NodeMTBI]:
    """Each node with two incidents or more and the mean time between them, most frequent first."""
    faults: dict[str, list[datetime]] = defaultdict(list)
    for incident in incidents:
        faults[incident.node].append(incident.fault_at)
    # The mean of the gaps between consecutive faults is the first-to-last span over their number.
    found = [
        NodeMTBI(node=node, incidents=len(times), mean_gap=(max(times) - min(times)) / (len(times) - 1))
        for node, times in faults.items()
        if len(times) >= 2
    ]
    return sorted(found, key=lambda entry: (entry.mean_gap, entry.node))


@dataclass(frozen=True)
class ModelMTBI:
    gpu_model: str
    nodes: int
    incidents: int
    node_time_between_incidents: timedelta


def mtbi_per_gpu_model(
    incidents: Iterable[IncidentTimes], nodes_per_model: Mapping[str, int], window: timedelta
) -> list[ModelMTBI]:
    """Per GPU model, node-time between incidents: the model's nodes times the window, divided by
    the window's incidents on them, i.e. how long one such node runs, on average, from one incident
    to the next. A model without incidents has nothing to divide by and is left out, as are
    incidents on nodes whose model is unknown."""
    per_model: dict[str, int] = defaultdict(int)
    for incident in incidents:
        per_model[incident.gpu_model] += 1
    return [
        ModelMTBI(
            gpu_model=model,
            nodes=nodes_per_model[model],
            incidents=count,
            node_time_between_incidents=window * nodes_per_model[model] / count,
        )
        for model, count in sorted(per_model.items())
        if nodes_per_model.get(model)
    ]


@dataclass(frozen=True)
class DayCounts:
    day: date
    counts: tuple[int, ...]  # one per outcome, in the order asked for

    @property
    def total(self) -> int:
        return sum(self.counts)


def per_day(
    counts: Iterable[tuple[date, str, int]], outcomes: Sequence[str], first_day: date, days: int
) -> list[DayCounts]:
    """(day, outcome, count) rows as one entry per day from `first_day`, quiet days included;
    outcomes not in `outcomes` are not counted."""
    found = {(day, outcome): count for day, outcome, count in counts}
    every_day = [first_day + timedelta(days=offset) for offset in range(days)]
    return [DayCounts(day, tuple(found.get((day, outcome), 0) for outcome in outcomes)) for day in every_day]
