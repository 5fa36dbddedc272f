"""The fleet floor: every node as a tile in its rack and pod, coloured by state; a large floor
collapses racks into per-state counts and lists the nodes an operator must look at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from django.conf import settings
from django.db import connection
from django.db.models import Count, QuerySet

from console.pages.disclosure import Disclosure
from core.kept import Kept
from fleet.lifecycle import State
from fleet.models import Node, Rack
from reservations.selectors import capacity_by_pod, capacity_versions

# Above this many nodes on screen a rack collapses into a bar of per-state counts: 10,000
# tiles would be megabytes of HTML every poll, and no operator reads them one by one.
COLLAPSE_ABOVE = 2000


# Nodes listed one by one under a collapsed floor: those an operator must look at.
ATTENTION_STATES = (State.QUARANTINED, State.MAINTENANCE)


ATTENTION_LIMIT = 200


@dataclass(frozen=True)
class LegendEntry:
    css: str
    label: str
    states: tuple[State, ...]


# What the floor colours: provisioning and active share the tenant-workload colour.
LEGEND = (
    LegendEntry("available", "available", (State.AVAILABLE,)),
    LegendEntry("workload", "tenant workload", (State.PROVISIONING, State.ACTIVE)),
    LegendEntry("inspecting", "inspecting", (State.INSPECTING,)),
    LegendEntry("wiping", "wiping", (State.WIPING,)),
    LegendEntry("quarantined", "quarantined", (State.QUARANTINED,)),
    LegendEntry("maintenance", "maintenance", (State.MAINTENANCE,)),
    LegendEntry("enrolled", "enrolled", (State.ENROLLED,)),
)


STATE_ORDER = [state for entry in LEGEND for state in entry.states]
_RANK = {state.value: rank for rank, state in enumerate(STATE_ORDER)}


@dataclass
class RackView:
    pod: str
    name: str
    counts: dict[str, int]  # by state: may be the floor's kept counts, shared, never changed
    tiles: list[dict] = field(default_factory=list)
    html: str = ""  # its tiles, filled in by console/pages/tiles.py

    @property
    def size(self) -> int:
        return sum(self.counts.values())


Segments = tuple[tuple[str, int], ...]  # a rack's counts by state, in the legend's order, none zero


@lru_cache(maxsize=1 << 12)  # racks' counts are few (a rack's size split over a few states)
def _in_legend_order(counts: tuple[tuple[str, int], ...]) -> Segments:
    return tuple(sorted(((state, count) for state, count in counts if count), key=lambda s: _RANK[s[0]]))


@dataclass
class PodView:
    name: str
    racks: list[RackView]  # none on a collapsed floor: `bars` instead
    capacity: dict | None = None
    # A collapsed floor's racks, each its name and segments, and their bars' HTML (filled in by
    # console/pages/tiles.py). Tuples, not a RackView a rack: 12,500 objects living through each
    # request made the collector's full passes over all the process keeps frequent, about 100 ms
    # of the p50 at 100,000 nodes.
    bars: list[tuple[str, Segments]] = field(default_factory=list)
    html: str = ""


@dataclass
class FloorView:
    pods: list[PodView]
    legend: list[dict]
    total: int
    collapsed: bool
    attention: list[dict]
    shown: int
    capacity: list[dict] = field(default_factory=list)
    attention_html: str = ""


def tile(row: dict, disclosure: Disclosure) -> dict:
    row["label"] = row["name"].rsplit("-", 1)[-1]
    row["in_use_by"] = disclosure.in_use_by(row.pop("tenant__name"))
    return row


TILE_FIELDS = ("name", "state", "step", "rack__name", "tenant__name")


@dataclass(frozen=True)
class _Screen:
    """The racks holding nodes on screen, by pod in the floor's order, each its name and counts;
    their bars when that many nodes collapse them; how many nodes."""

    racks: dict[str, list[tuple[str, dict[str, int]]]]
    bars: dict[str, list[tuple[str, Segments]]]
    shown: int


@dataclass(frozen=True)
class _Fleet:
    by_state: Counter[str]
    screen: _Screen  # the whole floor's


# Kept per process: the racks' names, at the topology's version, and the whole fleet's counts at
# that and the capacity's, which moves with every statement that changes a node's state.
_kept_racks: Kept[dict[int, tuple[str, str]]] = Kept()
_kept_fleet: Kept[_Fleet] = Kept()


def fleet_floor(nodes: QuerySet[Node], *, disclosure: Disclosure) -> FloorView:
    """Every rack holding any of `nodes` (the fleet, or what fleet.api.filtersets.NodeFilterSet
    kept of it) with those nodes as tiles, or collapsed to per-state counts when too many are on
    screen; the legend counts the whole fleet, and capacity is per pod.

    The counts are one scan of the nodes grouped by rack id, the racks' names kept per process;
    the whole floor is kept too while no node changes (see _whole_fleet)."""
    capacity_version, topology_version = capacity_versions()
    names = _kept_racks.get(topology_version, _rack_names)
    fleet = _whole_fleet((capacity_version, topology_version), names)
    # A filter on the nodes counts its own racks; the legend still counts the whole fleet.
    screen = _on_screen(names, _count_per_rack(nodes)[0]) if nodes.query.has_filters() else fleet.screen
    collapsed = screen.shown > COLLAPSE_ABOVE
    pods = {name: PodView(name=name, racks=[], bars=screen.bars.get(name, [])) for name in screen.racks}
    racks: dict[str, RackView] = {}
    if not collapsed:
        for pod_name, on_screen in screen.racks.items():
            for rack_name, counts in on_screen:
                racks[rack_name] = RackView(pod=pod_name, name=rack_name, counts=counts)
                pods[pod_name].racks.append(racks[rack_name])

    nodes = nodes.order_by("rack__name", "position")
    attention = []
    if collapsed:
        out_of_service = nodes.filter(state__in=ATTENTION_STATES).values(*TILE_FIELDS)[:ATTENTION_LIMIT]
        attention = [tile(row, disclosure) for row in out_of_service]
    else:
        for row in nodes.values(*TILE_FIELDS):
            if row["rack__name"] in racks:  # else enrolled since the counts were read
                racks[row["rack__name"]].tiles.append(tile(row, disclosure))

    capacity = capacity_by_pod()
    for summary in capacity:
        if summary["name"] in pods:
            pods[summary["name"]].capacity = summary
    return FloorView(
        pods=list(pods.values()),
        legend=legend_counts(fleet.by_state),
        total=sum(fleet.by_state.values()),
        collapsed=collapsed,
        attention=attention,
        shown=screen.shown,
        capacity=capacity,
    )


def _rack_names() -> dict[int, tuple[str, str]]:
    """Each rack's pod and name by its id, in the floor's order."""
    racks = Rack.objects.order_by("pod__name", "name").values_list("id", "pod__name", "name")
    return {rack_id: (pod, name) for rack_id, pod, name in racks}


def _whole_fleet(versions: tuple[int, int], names: dict[int, tuple[str, str]]) -> _Fleet:
    """The whole fleet's counts and floor, kept while `versions` (capacity's, topology's) stand,
    at most CAPACITY_MAX_AGE_SECONDS: the capacity version is a sequence, which a writer moves
    before it commits, so a count read in between is kept under the new version, as
    capacity_by_pod's is.

    Inside a transaction they are counted afresh and not kept: they may hold its own changes,
    which a rollback takes back while the version they moved stays."""

    def count() -> _Fleet:
        racks, by_state = _count_per_rack(Node.objects.all())
        return _Fleet(by_state=by_state, screen=_on_screen(names, racks))

    if not connection.get_autocommit():
        return count()
    return _kept_fleet.get(versions, count, max_age=settings.CAPACITY_MAX_AGE_SECONDS)


def _count_per_rack(nodes: QuerySet[Node]) -> tuple[dict[int, dict[str, int]], Counter[str]]:
    """`nodes` counted by rack id and state, and by state: grouped by the rack's id alone, with no
    join and no name compared, in a scan of every node."""
    racks: dict[int, dict[str, int]] = {}
    by_state: Counter[str] = Counter()
    for rack_id, state, count in nodes.order_by().values_list("rack_id", "state").annotate(count=Count("*")):
        racks.setdefault(rack_id, {})[state] = count
        by_state[state] += count
    return racks, by_state


def _on_screen(names: dict[int, tuple[str, str]], counts: dict[int, dict[str, int]]) -> _Screen:
    """The racks with `counts` (by rack id) by pod, and their bars if they are too many nodes to show."""
    racks: dict[str, list[tuple[str, dict[str, int]]]] = {}
    shown = 0
    # A rack enrolled between the names' read and the count waits for the next poll.
    for rack_id, (pod, rack) in names.items():
        if (rack_counts := counts.get(rack_id)) is not None:
            racks.setdefault(pod, []).append((rack, rack_counts))
            shown += sum(rack_counts.values())
    bars = {}
    if shown > COLLAPSE_ABOVE:
        bars = {pod: [(rack, _in_legend_order(tuple(c.items()))) for rack, c in rs] for pod, rs in racks.items()}
    return _Screen(racks=racks, bars=bars, shown=shown)


def legend_counts(by_state: Counter[str]) -> list[dict]:
    return [
        {
            "css": entry.css,
            "label": entry.label,
            "count": sum(by_state[state] for state in entry.states),
            "states": [(state.value, by_state[state]) for state in entry.states] if len(entry.states) > 1 else [],
        }
        for entry in LEGEND
    ]
