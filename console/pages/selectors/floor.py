"""The fleet floor: every node as a tile in its rack and pod, coloured by state; a large floor
collapses racks into per-state counts and lists the nodes an operator must look at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count, Q, QuerySet

from console.pages.disclosure import Disclosure
from fleet.lifecycle import State
from fleet.models import Node
from reservations.selectors import capacity_by_pod

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


@dataclass
class RackView:
    pod: str
    name: str
    counts: dict[str, int]
    tiles: list[dict] = field(default_factory=list)
    html: str = ""  # its tiles or its bar, filled in by console/pages/tiles.py

    @property
    def size(self) -> int:
        return sum(self.counts.values())

    @property
    def segments(self) -> list[tuple[str, int]]:
        return [(state, self.counts[state]) for state in STATE_ORDER if self.counts.get(state)]


@dataclass
class PodView:
    name: str
    racks: list[RackView]
    capacity: dict | None = None

    @property
    def size(self) -> int:
        return sum(rack.size for rack in self.racks)


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


def fleet_floor(nodes: QuerySet[Node], *, disclosure: Disclosure) -> FloorView:
    """Every rack holding any of `nodes` (the fleet, or what fleet.api.filtersets.NodeFilterSet
    kept of it) with those nodes as tiles, or collapsed to per-state counts when too many are on
    screen; the legend counts the whole fleet, and capacity is per pod."""
    per_rack = (
        Node.objects.values_list("rack__pod__name", "rack__name", "state")
        .annotate(count=Count("id"), kept=Count("id", filter=Q(id__in=nodes.values("id"))))
        .order_by("rack__pod__name", "rack__name")
    )
    pods: dict[str, PodView] = {}
    racks: dict[str, RackView] = {}
    by_state: Counter[str] = Counter()
    for pod_name, rack_name, state, count, kept in per_rack:
        by_state[state] += count
        if not kept:
            continue
        if rack_name not in racks:
            racks[rack_name] = RackView(pod=pod_name, name=rack_name, counts={})
            pods.setdefault(pod_name, PodView(name=pod_name, racks=[])).racks.append(racks[rack_name])
        racks[rack_name].counts[state] = kept
    shown = sum(r.size for r in racks.values())
    collapsed = shown > COLLAPSE_ABOVE

    nodes = nodes.order_by("rack__name", "position")
    attention = []
    if collapsed:
        out_of_service = nodes.filter(state__in=ATTENTION_STATES).values(*TILE_FIELDS)[:ATTENTION_LIMIT]
        attention = [tile(row, disclosure) for row in out_of_service]
    else:
        for row in nodes.values(*TILE_FIELDS):
            racks[row["rack__name"]].tiles.append(tile(row, disclosure))

    capacity = capacity_by_pod()
    for summary in capacity:
        if summary["name"] in pods:
            pods[summary["name"]].capacity = summary
    return FloorView(
        pods=list(pods.values()),
        legend=legend_counts(by_state),
        total=sum(by_state.values()),
        collapsed=collapsed,
        attention=attention,
        shown=shown,
        capacity=capacity,
    )


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
