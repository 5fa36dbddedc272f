"""The fabric's levels, and where a node sits in each: pure, no Django.

A fleet's fabric is a tree of domains, one level under another, from the pod at the top (a
scalable unit: the widest domain a reservation stays in) to the NVLink domain at the bottom (a
rack whose nodes share one NVLink fabric). Between them an operator's fabric has levels of its
own, named by its inventory: the leaf switches of an InfiniBand or RoCE fabric, the spine groups
above them. `("pod", "spine_group", "leaf", "nvlink_domain")` is such a list; a fleet that names
none has only the two ends, as the control plane had before levels existed.

The ends are the fleet's pods and racks; only the levels between them are stored as levels
(fleet.models.FabricLevel). An inventory gives each node its domain at every level
(`{"pod": "p1", "leaf": "p1-leaf1", "nvlink_domain": "r01"}`), which must agree with its pod
and rack.

The switches of the fabric serve its domains (`Switch`): a leaf switch the domain at the deepest
level above the racks (its leaf), a spine switch a domain higher up (its pod, or its spine group).
Which nodes an unhealthy switch cuts off is fleet/fabric_health.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core import validation
from core.topology import LEAF_SWITCH, NVLINK_DOMAIN, POD, SPINE_SWITCH

MAX_LEVELS = 8
LEVEL = re.compile(r"[a-z][a-z0-9_]{0,31}")
DOMAIN = re.compile(r"[-a-zA-Z0-9_]{1,64}")  # a slug, as pods and racks are named
MAX_SWITCHES = 100_000

Path = tuple[tuple[str, str], ...]  # (level, domain) of the levels between the pod and the rack, top down


def parse_levels(value: object, where: str = "fabric_levels") -> tuple[str, ...]:
    """The fabric's levels, top down: `pod` first, `nvlink_domain` last, each a distinct lowercase name."""
    levels = validation.sequence(
        value, where, min_items=2, max_items=MAX_LEVELS, expected=f"a list of 2 to {MAX_LEVELS} level names"
    )
    for position, level in enumerate(levels):
        validation.matches(
            level, validation.at(where, position), LEVEL, "a level name: lowercase letters, digits and _"
        )
    if levels[0] != POD or levels[-1] != NVLINK_DOMAIN:
        raise validation.Invalid(where, f"must start with {POD!r} and end with {NVLINK_DOMAIN!r}", levels)
    if len(set(levels)) < len(levels):
        raise validation.Invalid(where, "must name each level once", levels)
    return tuple(levels)


def parse_position(value: object, where: str, *, levels: Sequence[str], pod: str, rack: str) -> Path:
    """A node's domain at every level (`{level: domain}`), checked against its pod and rack; the
    levels between them, top down."""
    position = validation.mapping(value, where, expected="an object of level -> domain")
    if set(position) != set(levels):
        raise validation.Invalid(where, f"must name a domain at each level: {', '.join(levels)}", sorted(position))
    for level in levels:
        validation.matches(
            position[level], validation.at(where, level), DOMAIN, "a domain name: letters, digits, - and _"
        )
    if position[POD] != pod or position[NVLINK_DOMAIN] != rack:
        raise validation.Invalid(where, f"must put the node in its pod {pod} and rack {rack}", position)
    return tuple((level, position[level]) for level in levels[1:-1])


@dataclass(frozen=True)
class Switch:
    """One switch and the domain it serves (`domain` is a pod's name when `level` is the pod)."""

    name: str
    kind: str  # LEAF_SWITCH or SPINE_SWITCH
    level: str
    domain: str


def parse_switches(
    value: object, where: str, *, levels: Sequence[str], domains: Mapping[str, set[str]]
) -> list[Switch]:
    """The fabric's switches, each serving a domain the nodes name (`domains`: those of each level,
    the pods' under `pod`): a leaf switch one of the deepest level above the racks, a spine one higher."""
    leaf_level = levels[-2]
    parsed = []
    for number, entry in enumerate(
        validation.sequence(value, where, max_items=MAX_SWITCHES, expected="a list of switches")
    ):
        here = validation.at(where, number)
        entry = validation.mapping(entry, here)
        name = validation.matches(
            entry.get("name"), validation.at(here, "name"), DOMAIN, "a switch name: letters, digits, - and _"
        )
        kind = validation.one_of(entry.get("kind"), validation.at(here, "kind"), (LEAF_SWITCH, SPINE_SWITCH))
        level = validation.one_of(entry.get("level"), validation.at(here, "level"), tuple(levels[:-1]))
        if kind == LEAF_SWITCH and level != leaf_level:
            raise validation.Invalid(
                validation.at(here, "level"), f"a leaf switch must serve the level above the racks, {leaf_level}", level
            )
        if kind == SPINE_SWITCH and level not in levels[:-2]:
            raise validation.Invalid(
                validation.at(here, "level"), f"a spine switch must serve a level above {leaf_level}", level
            )
        domain = entry.get("domain")
        if not isinstance(domain, str) or domain not in domains.get(level, ()):
            raise validation.Invalid(
                validation.at(here, "domain"), f"must be a {level} domain that the nodes name", domain
            )
        parsed.append(Switch(name=name, kind=kind, level=level, domain=domain))
    if len({switch.name for switch in parsed}) < len(parsed):
        raise validation.Invalid(where, "must name each switch once", sorted(switch.name for switch in parsed))
    return parsed


def check_tree(placed: Iterable[tuple[str, str, Path]]) -> None:
    """(pod, rack, path) of every node: one list of levels for all, and one tree: each rack under one
    path, each domain at one level, in one pod, under one parent. Invalid names the first clash."""
    placed = list(placed)
    levels = {tuple(level for level, _ in path) for _, _, path in placed}
    if len(levels) > 1:
        raise validation.Invalid("fabric", "every node must name the same levels", sorted(levels))
    rack_paths: dict[str, tuple[str, Path]] = {}
    domains: dict[str, tuple[str, str, str | None]] = {}
    for pod, rack, path in placed:
        if rack_paths.setdefault(rack, (pod, path)) != (pod, path):
            raise validation.Invalid(
                f"fabric.{rack}", "a rack must sit in one place in the fabric", [rack_paths[rack], (pod, path)]
            )
        parent = None
        for level, name in path:
            if domains.setdefault(name, (level, pod, parent)) != (level, pod, parent):
                raise validation.Invalid(
                    f"fabric.{name}", "a domain must have one level, pod and parent", domains[name]
                )
            parent = name
