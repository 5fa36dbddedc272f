"""Tenants' power actions on their nodes through the BMC, and the forced restart of a reboot the
OS ignored: each a row of fleet.models.PowerAction that the worker takes before it calls the BMC,
so a message sent twice does it once (fleet/services/power.py)."""

from __future__ import annotations

from fleet import services
from fleet.models import PowerActionKind, PowerActionState
from workflows.clients import HARDWARE, Clients
from workflows.redfish import RESET_FORCE_RESTART, RESET_GRACEFUL_RESTART, RESET_POWER_CYCLE, RedfishError

NOT_TAKEN = "taken by another worker, closed, or the reservation no longer holds the node"


def power_action(*, power_action_id: int, clients: Clients = HARDWARE) -> str:
    """Ask the BMC for the tenant's power action; a reboot is checked once its grace is over
    (`force_restart_if_stuck`, sent by the reconciler). A BMC that refuses fails the action."""
    power = services.take_power_action(power_action_id=power_action_id, waiting=PowerActionState.DUE)
    if power is None:
        return NOT_TAKEN
    bmc = clients.bmc(power.node)
    try:
        if power.action == PowerActionKind.POWER_CYCLE:
            bmc.reset(RESET_POWER_CYCLE)
            return services.finish_power_action(
                power_action_id=power_action_id, state=PowerActionState.DONE, result="power cycled"
            )
        before = bmc.last_reset_time()
        bmc.reset(RESET_GRACEFUL_RESTART)
    except RedfishError as error:
        return _failed(power_action_id, error)
    finally:
        bmc.close()
    services.restart_asked(power_action_id=power_action_id, reset_before=before or "")
    return "graceful restart asked"


def force_restart_if_stuck(*, power_action_id: int, clients: Clients = HARDWARE) -> str:
    """The reboot's second half: a system whose BMC reports no reset since the graceful request is
    forced, and that is audited. A BMC that reports no LastResetTime cannot tell: nothing is forced."""
    power = services.take_power_action(power_action_id=power_action_id, waiting=PowerActionState.RESTART_DUE)
    if power is None:
        return NOT_TAKEN
    bmc = clients.bmc(power.node)
    try:
        reset_at = bmc.last_reset_time()
        if reset_at is None or reset_at != power.reset_before:
            why = "restarted gracefully" if reset_at else "the BMC does not say when it last reset"
            return services.finish_power_action(
                power_action_id=power_action_id, state=PowerActionState.DONE, result=why
            )
        bmc.reset(RESET_FORCE_RESTART)
    except RedfishError as error:
        return _failed(power_action_id, error)
    finally:
        bmc.close()
    services.restart_forced(power_action_id=power_action_id)
    return "forced"


def _failed(power_action_id: int, error: RedfishError) -> str:
    return services.finish_power_action(
        power_action_id=power_action_id, state=PowerActionState.FAILED, result=f"the BMC did not do it: {error}"
    )
