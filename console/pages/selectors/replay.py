"""An incident's replay: the floor of its pods just before it, stepped through its events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F

from console.pages.disclosure import Disclosure
from console.pages.selectors.floor import FloorView, PodView, RackView, legend_counts, tile
from console.pages.selectors.incidents import Incident, incident
from fleet.models import AuditEvent, Node


@dataclass(frozen=True)
class Frame:
    at: datetime
    caption: str
    node: str = ""
    to_state: str = ""


@dataclass
class Replay:
    incident: Incident
    frames: list[Frame]
    step: int
    floor: FloorView
    changed: str  # the node whose state this step changed


def replay(key: str, step: int, *, disclosure: Disclosure) -> Replay | None:
    """The floor of the incident's pods as it was just before the incident, with its events up
    to `step` applied: the incident's own steps and the audit log of the nodes involved."""
    found = incident(key, disclosure=disclosure)
    if found is None or not found.happened:
        return None
    start = found.happened[0].at
    pods = list(Node.objects.filter(name__in=found.involved).values_list("rack__pod__name", flat=True).distinct())
    layout = list(
        Node.objects.filter(rack__pod__name__in=pods)
        .order_by("rack__pod__name", "rack__name", "position")
        .values("id", "name", "rack__name", "rack__pod__name")
    )
    frames = _replay_frames(found, disclosure)
    step = max(0, min(step, len(frames) - 1))
    before = _states_before(pods, start)
    states = {row["name"]: before.get(row["id"]) for row in layout}
    for frame in frames[1 : step + 1]:
        if frame.node:
            states[frame.node] = frame.to_state
    floor = _floor_of(layout, states, disclosure)
    return Replay(incident=found, frames=frames, step=step, floor=floor, changed=frames[step].node)


def _states_before(pods: list[str], start: datetime) -> dict[int, str]:
    """Each node's state just before the incident: the last state its audit log recorded."""
    return dict(
        AuditEvent.objects.filter(node__rack__pod__name__in=pods, at__lt=start)
        .exclude(to_state="")
        .order_by("node_id", "-at", "-id")
        .distinct("node_id")
        .values_list("node_id", "to_state")
    )


def _replay_frames(found: Incident, disclosure: Disclosure) -> list[Frame]:
    """The incident's steps and its nodes' changes of state, in time order, after a first frame
    for the moment before it."""
    start, end = found.happened[0].at, max(s.at for s in found.happened)
    changes = [
        Frame(
            e.at,
            f"{e.node.name}: {e.event} ({e.from_state} → {e.to_state}) by {disclosure.actor(e.actor)}",
            e.node.name,
            e.to_state,
        )
        for e in AuditEvent.objects.filter(node__name__in=found.involved, at__gte=start, at__lte=end)
        .exclude(to_state="")
        .exclude(to_state=F("from_state"))
        .select_related("node")
        .order_by("at", "id")
    ]
    markers = [Frame(s.at, f"{s.name.replace('_', ' ')} {s.detail}".strip()) for s in found.happened]
    return [Frame(start, "before the incident"), *sorted(markers + changes, key=lambda f: f.at)]


def _floor_of(layout: Sequence[Mapping[str, Any]], states: dict[str, str | None], disclosure: Disclosure) -> FloorView:
    """The floor's pods and racks with each node in `states` (a node with none was not enrolled yet)."""
    racks: dict[str, RackView] = {}
    floor_pods: dict[str, PodView] = {}
    by_state: Counter[str] = Counter()
    for row in layout:
        state = states[row["name"]]
        if state is None:
            continue
        by_state[state] += 1
        rack = racks.get(row["rack__name"])
        if rack is None:
            rack = racks[row["rack__name"]] = RackView(pod=row["rack__pod__name"], name=row["rack__name"], counts={})
            floor_pods.setdefault(rack.pod, PodView(name=rack.pod, racks=[])).racks.append(rack)
        rack.counts[state] = rack.counts.get(state, 0) + 1
        rack.tiles.append(tile({"name": row["name"], "state": state, "step": "", "tenant__name": None}, disclosure))
    return FloorView(
        pods=list(floor_pods.values()),
        legend=legend_counts(by_state),
        total=sum(by_state.values()),
        collapsed=False,
        attention=[],
        shown=sum(by_state.values()),
    )
