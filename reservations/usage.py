"""Usage: node-seconds a reservation was served, from its holds, its nodes' states and its own.

No Django import. A node counts for a reservation while the reservation holds it and the node is
active (the hold makes it the reservation's node). Of that time, what passed while the
reservation was degraded (it had lost a node) is shown apart, and so is the time a replacement
node was held but not up yet: an operator may credit both; neither is the tenant's active use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

KINDS = ("node_seconds_active", "node_seconds_degraded", "node_seconds_replacement")
_MONTH_AND_A_BIT = timedelta(days=32)  # from a month's first day, into the next month


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime

    def clip(self, other: Span) -> Span | None:
        start, end = max(self.start, other.start), min(self.end, other.end)
        return Span(start, end) if start < end else None


@dataclass(frozen=True)
class Hold:
    node: str
    span: Span
    replacement: bool  # placed to replace a node the reservation lost


def node_seconds(
    holds: Iterable[Hold], active: Mapping[str, Sequence[Span]], degraded: Sequence[Span], window: Span
) -> dict[str, int]:
    """One reservation's node-seconds within `window`, by kind (KINDS): `active` gives each node's
    spans in the active state, `degraded` the reservation's spans in the degraded state."""
    totals = dict.fromkeys(KINDS, 0.0)
    for hold in holds:
        held = hold.span.clip(window)
        if held is None:
            continue
        served = [s for span in active.get(hold.node, ()) if (s := span.clip(held))]
        served_seconds = sum(_seconds(s) for s in served)
        worse = sum(_seconds(d) for s in served for span in degraded if (d := s.clip(span)))
        totals["node_seconds_active"] += served_seconds - worse
        totals["node_seconds_degraded"] += worse
        if hold.replacement:
            totals["node_seconds_replacement"] += _seconds(held) - served_seconds
    return {kind: round(seconds) for kind, seconds in totals.items()}


def spans(changes: Iterable[tuple[datetime, bool]], *, until: datetime) -> list[Span]:
    """The spans in which something was in a state, from its changes in time order: (when, in the
    state from then on). A span still open at the end closes at `until`."""
    result, since = [], None
    for at, inside in changes:
        if inside and since is None:
            since = at
        elif not inside and since is not None:
            result.append(Span(since, at))
            since = None
    if since is not None and since < until:
        result.append(Span(since, until))
    return result


def calendar_month(moment: datetime) -> Span:
    """The calendar month that holds `moment`, in its time zone (UTC for the API's datetimes)."""
    first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return Span(first, (first + _MONTH_AND_A_BIT).replace(day=1))


def months(window: Span) -> list[Span]:
    """The calendar months that `window` touches, each clipped to it."""
    result, start = [], window.start
    while start < window.end:
        following = calendar_month(start).end
        result.append(Span(start, min(following, window.end)))
        start = following
    return result


def _seconds(span: Span) -> float:
    return (span.end - span.start).total_seconds()
