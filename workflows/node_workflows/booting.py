"""Steps that boot a node from virtual media, wait for its agent, and leave it powered off and
without media.
"""

from __future__ import annotations

from django.conf import settings

from workflows.agent import AgentUnavailable
from workflows.node_workflows.run import Run
from workflows.redfish import RESET_FORCE_OFF, RESET_FORCE_RESTART, RESET_ON


def boot_image(run: Run, image_url: str) -> None:
    run.bmc.insert_media(image_url)
    run.bmc.set_boot_override("Cd", "Once")
    run.bmc.reset(RESET_FORCE_RESTART if run.bmc.power_state() == "On" else RESET_ON)


def boot_service_image(run: Run) -> None:
    """Boot the control plane's own image (inspection, wipe), which runs the agent."""
    boot_image(run, settings.SERVICE_IMAGE_URL)


def wait_for_agent(run: Run) -> None:
    def answers() -> bool:
        try:
            run.agent.inventory()
        except AgentUnavailable:
            return False
        return True

    run.wait_until("the node's agent to answer", answers, settings.AGENT_BOOT_TIMEOUT)


def eject_media(run: Run) -> None:
    run.bmc.eject_media()


def clear_boot_override(run: Run) -> None:
    run.bmc.clear_boot_override()


def power_off(run: Run) -> None:
    if run.bmc.power_state() != "Off":
        run.bmc.reset(RESET_FORCE_OFF)
    run.wait_until("power off", lambda: run.bmc.power_state() == "Off", settings.AGENT_BOOT_TIMEOUT)
