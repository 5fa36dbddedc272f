"""What placement is asked and what it answers: the request, each rack's free capacity, a rack
as one request sees it, and the refusal with the offer of a later start that the service adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from core.errors import Conflict
from core.topology import NVLINK_DOMAIN, POD
from fleet.fabric import Path


@dataclass(frozen=True)
class RackCapacity:
    pod: str
    rack: str
    nodes: tuple[str, ...]  # every node of the rack in slot order; defines the rack's size
    free: tuple[str, ...]  # the nodes free for the requested period
    gpu_models: Mapping[str, str] | None = None  # node -> GPU model; None: models unknown
    recently_tested: frozenset[str] = frozenset()  # nodes with a recent long diagnostics pass
    path: Path = ()  # the rack's domains between its pod and itself; () when the fabric has no such level
    attributes: Mapping[str, Mapping[str, str]] | None = None  # node -> operator-defined attributes

    @property
    def domains(self) -> tuple[str, ...]:
        return _domains(self.pod, self.path, self.rack)

    def domain_at(self, level: str) -> str | None:
        """The rack's domain at `level`: its pod, a domain of its path, or itself; None if no such level."""
        if level == POD:
            return self.pod
        if level == NVLINK_DOMAIN:
            return self.rack
        return dict(self.path).get(level)


@dataclass(frozen=True)
class PlacementRequest:
    node_count: int
    pod: str | None = None  # None: any pod
    rack_scale: bool = False  # whole racks only, every node of each chosen rack: whole="nvlink_domain"
    gpu_model: str | None = None  # None: any model
    near: frozenset[str] = frozenset()  # racks to fill first: where a growing reservation has its nodes
    required: str = POD  # the level one domain of which holds every chosen node
    preferred: str | None = None  # a level whose domains spanned are minimised before any other's
    whole: str | None = None  # a level whose domains are taken whole, every node of each
    attributes: Mapping[str, str] = field(default_factory=dict)  # every chosen node has these values
    within: str | None = None  # a domain (of any level) that holds every chosen node: where a reservation heals

    @property
    def whole_level(self) -> str | None:
        return self.whole or (NVLINK_DOMAIN if self.rack_scale else None)


@dataclass(frozen=True)
class Offer:
    """The first later period in which a refused request fits (reservations/offers.py finds it)."""

    starts_at: datetime
    ends_at: datetime
    pod: str
    nodes: tuple[str, ...]  # what placement would choose then; taking the offer places again


class PlacementRefused(Conflict):
    """No placement exists; `reason` says why in words a tenant can act on, and `offer` (set by the
    service) when the request would fit later."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
        self.offer: Offer | None = None


class Rack(NamedTuple):
    """A rack as one request sees it (a tuple: placement builds one per rack per request)."""

    pod: str
    name: str
    nodes: tuple[str, ...]
    usable: tuple[str, ...]  # free nodes of the requested model and attributes, in slot order
    whole: bool  # every node free: taking any of it costs a whole rack
    whole_usable: bool  # whole, and every node usable: fit for a whole-rack request
    tested: int = 0  # usable nodes with a recent diagnostics pass, which `usable` lists first
    path: Path = ()

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def domains(self) -> tuple[str, ...]:
        return _domains(self.pod, self.path, self.name)


def _domains(pod: str, path: Path, rack: str) -> tuple[str, ...]:
    """A rack's domain at every level, top down: pod, the path's domains, the rack."""
    return (pod, *(name for _, name in path), rack)
