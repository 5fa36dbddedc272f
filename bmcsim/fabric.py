"""The fabric's switches as simulated hardware: their faults, their health and each port's link.

The switches are core.topology.fabric_switches of the fleet's layout. A port is one end of a
cable, named after what the other end is: a node (a leaf's downlink) or a switch (a leaf's uplink
to a spine, a spine's port to a leaf). Both ends of a cable between switches see the same link:
it is down while either switch is down (`switch_down`), and flaps while a `port_flap` holds
either end. A node's end is its HCA, which has no faults of its own here.

A flapping link is down for `period_s`, then up for as long, and so on from the moment the flap
was injected, in simulated time: the period is multiplied by the time scale, so at scale 0 a
flapping link reads down.
"""

from __future__ import annotations

from core.topology import SwitchSpec

from .persisted import PersistedState

SWITCH_DOWN = "switch_down"
PORT_FLAP = "port_flap"


class SwitchState(PersistedState[SwitchSpec]):
    """One switch; its faults are persisted."""

    __slots__ = ("faults", "spec")
    PERSISTED = ("faults",)

    def __init__(self, spec: SwitchSpec):
        self.spec = spec
        self.faults: list[dict] = []

    def clear_faults(self) -> int:
        cleared, self.faults = len(self.faults), []
        return cleared

    @property
    def is_down(self) -> bool:
        return any(f["kind"] == SWITCH_DOWN for f in self.faults)

    def flap(self, port: str) -> dict | None:
        return next((f for f in self.faults if f["kind"] == PORT_FLAP and f["port"] == port), None)

    @property
    def health(self) -> str:
        """Critical while down, Warning while one of its ports flaps, else OK."""
        if self.is_down:
            return "Critical"
        return "Warning" if any(f["kind"] == PORT_FLAP for f in self.faults) else "OK"


def port_link(
    switches: dict[str, SwitchState], switch: SwitchState, port: str, now: float, scale: float
) -> tuple[bool, str]:
    """(link up, health) of a port: down and Critical while a switch at either end of its cable is
    down; as the flap has it and Warning while either end flaps; else up and OK."""
    peer = switches.get(port)
    ends = [(switch, port), (peer, switch.name)] if peer is not None else [(switch, port)]
    if any(end.is_down for end, _ in ends):
        return False, "Critical"
    flaps = [flap for end, name in ends if (flap := end.flap(name)) is not None]
    if flaps:
        return all(_flap_phase_up(flap, now, scale) for flap in flaps), "Warning"
    return True, "OK"


def _flap_phase_up(flap: dict, now: float, scale: float) -> bool:
    """Down for the first period from the injection, up for the next, and so on."""
    period = flap["period_s"] * scale
    if period <= 0:
        return False
    return int((now - flap["started_at"]) // period) % 2 == 1
