"""Which nodes an unhealthy switch cuts off from the fabric: pure, no Django.

The rule. A node is cut off when

- a leaf switch serving one of its domains (its leaf) is down: Health Critical, or a State that
  says it is not running (DOWN_STATES, as bmcsim's UnavailableOffline while `switch_down`);
- or that leaf switch's downlink port to it is down (LINK_DOWN): a leaf's downlinks are named after
  the nodes they reach, as bmcsim's Redfish Fabrics name them;
- or every spine switch serving one of its domains (its pod, or its spine group) is down: while
  one spine is up, traffic takes it.

Anything else cuts nothing off and is only shown: a Warning (a port flapping up and down, which
reads LinkDown only in its down phase), a spine down while another serves, a link down between
switches. A switch's health is what the last successful read found (workflows/fabric_health.py):
a switch never read is `unknown` and cuts nothing off, so a switch manager that cannot be reached
does not stop placement fleet-wide, and a switch read down stays down until it is read up again.

Placement keeps off a cut-off node at once. Taking it from the tenant it serves (its wipe follows)
waits until the trouble has lasted a while (`as_of`): a link that flaps once costs nobody a node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from core.topology import LEAF_SWITCH, POD
from fleet import fabric

OK, WARNING, CRITICAL, UNKNOWN = "OK", "Warning", "Critical", "unknown"
HEALTHS = (OK, WARNING, CRITICAL, UNKNOWN)  # Redfish's Status.Health, and ours for never read
# Redfish Status.State values of a switch that passes no traffic.
DOWN_STATES = frozenset({"Absent", "Disabled", "StandbyOffline", "UnavailableOffline"})
LINK_DOWN = frozenset({"LinkDown", "NoLink"})  # Redfish Port.LinkStatus values of a link that carries nothing


@dataclass(frozen=True)
class SwitchReading:
    """A switch as last read: the domain it serves, its Status and the ports whose link is down."""

    name: str
    kind: str  # core.topology.LEAF_SWITCH or SPINE_SWITCH
    serves: tuple[str, str]  # (level, domain): ("pod", "p1"), ("leaf", "p1-leaf1")
    health: str  # one of HEALTHS
    state: str  # Status.State, "" if never read
    links_down: frozenset[str]
    troubled_since: datetime | None = None  # since when its readings have shown it in_trouble; None: unknown

    @property
    def down(self) -> bool:
        return _down(self.health, self.state)

    def as_of(self, now: datetime, lasting: timedelta) -> SwitchReading:
        """This reading, or a healthy one if its trouble began less than `lasting` before `now`."""
        if self.troubled_since is None or now - self.troubled_since >= lasting:
            return self
        return replace(self, health=OK, state="Enabled", links_down=frozenset())


def in_trouble(health: str, state: str, links_down: Iterable[str]) -> bool:
    """Down, or a port down: a reading that may cut a node off."""
    return _down(health, state) or any(True for _ in links_down)


def _down(health: str, state: str) -> bool:
    return health == CRITICAL or state in DOWN_STATES


@dataclass(frozen=True)
class RackNodes:
    """One rack's nodes and where it sits in the fabric."""

    pod: str
    path: fabric.Path  # its domains between the pod and itself
    ids: Sequence[int]
    names: Sequence[str]  # in the order of `ids`


def cut_off(switches: Iterable[SwitchReading], racks: Iterable[RackNodes]) -> dict[int, str]:
    """The ids of the nodes of `racks` that the switches cut off (the module's rule), each with why:
    "leaf switch p1-leaf1 down", "port node-003 of leaf switch p1-leaf1 down", "every spine of p1 down"."""
    leaves: dict[tuple[str, str], list[SwitchReading]] = defaultdict(list)
    spines: dict[tuple[str, str], list[SwitchReading]] = defaultdict(list)
    for switch in switches:
        (leaves if switch.kind == LEAF_SWITCH else spines)[switch.serves].append(switch)
    whole: dict[tuple[str, str], str] = {}  # domain -> why all its nodes are cut off
    for domain, serving in spines.items():
        if all(spine.down for spine in serving):
            whole[domain] = f"every spine of {domain[1]} down ({', '.join(spine.name for spine in serving)})"
    ports_down: dict[tuple[str, str], list[SwitchReading]] = defaultdict(list)
    for domain, serving in leaves.items():
        for leaf in serving:
            if leaf.down:
                whole.setdefault(domain, f"leaf switch {leaf.name} down")
            elif leaf.links_down:
                ports_down[domain].append(leaf)
    if not whole and not ports_down:
        return {}
    found: dict[int, str] = {}
    for rack in racks:
        domains = ((POD, rack.pod), *rack.path)
        reason = next((whole[domain] for domain in domains if domain in whole), None)
        if reason is not None:
            found.update(dict.fromkeys(rack.ids, reason))
            continue
        leaves_with_ports_down = [leaf for domain in domains for leaf in ports_down.get(domain, ())]
        for node_id, name in zip(rack.ids, rack.names, strict=True):
            cut_by = next((leaf for leaf in leaves_with_ports_down if name in leaf.links_down), None)
            if cut_by is not None:
                found[node_id] = f"port {name} of leaf switch {cut_by.name} down"
    return found
