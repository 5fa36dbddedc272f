"""Tenants' power actions on their nodes through the BMC, and the forced restart of a reboot the
OS ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from fleet import services
from fleet.lifecycle import State
from fleet.models import Node
from workflows.clients import HARDWARE, Clients
from workflows.redfish import RESET_FORCE_RESTART, RESET_GRACEFUL_RESTART, RESET_POWER_CYCLE

POWER_ACTOR = "system:power"


def _still_serving(node_id: int, reservation_id: int) -> Node | None:
    return Node.objects.filter(pk=node_id, state=State.ACTIVE, reservation_id=reservation_id).first()


def power_action(
    *,
    node_id: int,
    action: str,
    reservation_id: int,
    force_later: Callable[[int, int, str | None], None],
    clients: Clients = HARDWARE,
) -> str:
    """Ask the BMC for the tenant's power action; for a reboot, have `force_later` check, after
    the grace, that the system was reset, and force it if not. Nothing if the node moved on."""
    node = _still_serving(node_id, reservation_id)
    if node is None:
        return "the node no longer serves the reservation"
    bmc = clients.bmc(node)
    try:
        if action == "power-cycle":
            bmc.reset(RESET_POWER_CYCLE)
            return "power cycled"
        before = bmc.last_reset_time()
        bmc.reset(RESET_GRACEFUL_RESTART)
    finally:
        bmc.close()
    force_later(node_id, reservation_id, before)
    return "graceful restart asked"


def force_restart_if_stuck(
    *, node_id: int, reservation_id: int, reset_before: str | None, clients: Clients = HARDWARE
) -> str:
    """The reboot's second half: a system whose BMC reports no reset since the graceful request is
    forced, and that is audited. A BMC that reports no LastResetTime cannot tell: nothing is forced."""
    node = _still_serving(node_id, reservation_id)
    if node is None:
        return "the node no longer serves the reservation"
    bmc = clients.bmc(node)
    try:
        reset_at = bmc.last_reset_time()
        if reset_at is None or reset_at != reset_before:
            return "restarted gracefully" if reset_at else "the BMC does not say when it last reset"
        bmc.reset(RESET_FORCE_RESTART)
    finally:
        bmc.close()
    grace = settings.TENANT_REBOOT_GRACE_SECONDS
    services.audit_power_action(node, actor=POWER_ACTOR, reason=f"reboot forced: no restart within {grace:g}s")
    return "forced"
