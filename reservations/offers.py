"""Earliest-start offers: when a request does not fit now, the first period in which it does.

No Django import. Capacity only grows at the moments a hold ends (or a node comes back into
service), so those moments are the only starts worth trying: a sweep over the holds in time
order keeps the set of nodes blocked for the candidate window, and placement itself (the pure
reservations/placement/) is asked only when some pod has enough free nodes for it to succeed.
The service reads the holds once, for the whole horizon, and the exclusion constraint still
decides when the tenant takes the offer.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from reservations.placement import Offer, PlacementRefused, PlacementRequest, RackCapacity, place

# Offer lives beside PlacementRefused, which carries one; the services and pages import it from here.
__all__ = ["Busy", "Offer", "earliest_offer"]


@dataclass(frozen=True)
class Busy:
    """A node that cannot be placed over [start, end): a hold, or a node not ready yet."""

    node: str
    start: datetime
    end: datetime


def earliest_offer(
    request: PlacementRequest,
    racks: Sequence[RackCapacity],
    busy: Iterable[Busy],
    *,
    earliest: datetime,
    latest_start: datetime,
    duration: timedelta,
) -> Offer | None:
    """The first start in [earliest, latest_start] at which `request` fits for `duration`, or None.

    `racks` list every rack with the nodes that can serve at all as free (out-of-service nodes
    left out); `busy` lists when the others cannot. Candidate starts are `earliest` and every end
    of a busy period after it, in order.
    """
    holds = sorted((b for b in busy if b.end > earliest), key=lambda b: b.start)
    candidates = sorted({earliest, *(b.end for b in holds if b.end <= latest_start)})
    room = _Room(request, racks)
    ending: list[tuple[datetime, int, str]] = []  # (end, tiebreak, node) of the periods counted
    added = 0
    for start in candidates:
        window_end = start + duration
        while added < len(holds) and holds[added].start < window_end:
            hold = holds[added]
            added += 1
            if hold.end > start and room.block(hold.node):
                heapq.heappush(ending, (hold.end, added, hold.node))
        while ending and ending[0][0] <= start:
            room.unblock(heapq.heappop(ending)[2])
        if not room.may_fit():
            continue
        try:
            chosen = place(request, [room.rack_now(r) for r in racks])
        except PlacementRefused:
            continue
        return Offer(starts_at=start, ends_at=window_end, pod=room.pod_of[chosen[0]], nodes=tuple(chosen))
    return None


class _Room:
    """Free nodes per pod (whole racks' nodes, for rack_scale) as busy periods come and go, kept
    by counts: a cheap necessary condition for placement, which is far dearer to ask."""

    def __init__(self, request: PlacementRequest, racks: Sequence[RackCapacity]):
        self.request = request
        self.pod_of = {node: r.pod for r in racks for node in r.nodes}
        self.rack_of = {node: (r.pod, r.rack) for r in racks for node in r.free}
        self.whole_size = {(r.pod, r.rack): len(r.nodes) for r in racks if r.nodes and len(r.free) == len(r.nodes)}
        self.room: Counter[str] = Counter({r.pod: 0 for r in racks})
        for r in racks:
            self.room[r.pod] += self.whole_size.get((r.pod, r.rack), 0) if request.rack_scale else len(r.free)
        self.blocked: Counter[str] = Counter()  # node -> busy periods overlapping the window
        self.blocked_in_rack: Counter[tuple[str, str]] = Counter()

    def block(self, node: str) -> bool:
        """Count one more busy period of `node`; False if the node cannot serve anyway."""
        rack = self.rack_of.get(node)
        if rack is None:
            return False
        self.blocked[node] += 1
        if self.blocked[node] == 1:
            self.blocked_in_rack[rack] += 1
            self._count(rack, changed=self.blocked_in_rack[rack] == 1, sign=-1)
        return True

    def unblock(self, node: str) -> None:
        rack = self.rack_of[node]
        self.blocked[node] -= 1
        if not self.blocked[node]:
            del self.blocked[node]
            self.blocked_in_rack[rack] -= 1
            self._count(rack, changed=not self.blocked_in_rack[rack], sign=1)

    def _count(self, rack: tuple[str, str], *, changed: bool, sign: int) -> None:
        if not self.request.rack_scale:
            self.room[rack[0]] += sign
        elif changed:  # the rack's first node blocked, or its last one freed
            self.room[rack[0]] += sign * self.whole_size.get(rack, 0)

    def may_fit(self) -> bool:
        if self.request.pod is not None:
            return self.room.get(self.request.pod, 0) >= self.request.node_count
        return any(n >= self.request.node_count for n in self.room.values())

    def rack_now(self, rack: RackCapacity) -> RackCapacity:
        if not self.blocked_in_rack.get((rack.pod, rack.rack)):
            return rack
        return replace(rack, free=tuple(node for node in rack.free if node not in self.blocked))
