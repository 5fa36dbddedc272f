"""Steps that boot a node from virtual media, wait for its agent, and power it off.

Every boot has a config drive beside its image, with the agent credentials of that boot (the
service image's, minted here) or of the tenancy (the tenant's image): a boot of the service image
revokes the last one's, and so do a tenant's boot and a power-off (fleet/services/credentials.py).
"""

from __future__ import annotations

from django.conf import settings

from fleet import lifecycle, services
from workflows.agent import AgentUnavailable
from workflows.clients import AgentRefusedCredentials
from workflows.config_drive import service_documents
from workflows.node_workflows.run import Run, StepFailed
from workflows.redfish import RESET_FORCE_OFF, RESET_FORCE_RESTART, RESET_ON


def boot_image(run: Run, image_url: str, *, config_drive: str) -> None:
    """Boot `image_url` from the virtual CD, the config drive whose token is `config_drive` beside it
    as a USB stick."""
    run.bmc.insert_media(f"{settings.CONFIG_DRIVE_BASE_URL}/v1/config-drives/{config_drive}", removable=True)
    run.bmc.insert_media(image_url)
    run.bmc.set_boot_override("Cd", "Once")
    run.bmc.reset(RESET_FORCE_RESTART if run.bmc.power_state() == "On" else RESET_ON)


def boot_service_image(run: Run) -> None:
    """Boot the control plane's own image (inspection, wipe), which runs the agent, with a config
    drive of its own: this boot's credentials, minted now, the last boot's revoked."""
    files = service_documents(instance_id=f"{run.node.name}-service-{run.lease.token}", hostname=run.node.name)
    drive = services.start_service_boot(lease=run.lease, actor=run.actor, files=files)
    boot_image(run, settings.SERVICE_IMAGE_URL, config_drive=drive)


def boot_service_image_unless_wiped(run: Run) -> None:
    """Inspection's boot. Straight after a wipe in the same visit, the node still runs the service
    image that the wipe booted, and its agent answered moments ago: the reset into that image ended
    the last tenant's OS, and only the control plane's image has run since, so inspection goes on
    in that boot, with its credentials, and no second boot follows the first. Any other way in
    (enrolment, an operator's return, a takeover, a visit that resumes) boots the image afresh."""
    if run.follows != lifecycle.State.WIPING:
        boot_service_image(run)


def wait_for_agent(run: Run) -> None:
    """Until the agent of this boot answers. One that still refuses this boot's credentials when
    the wait is over did not boot with them (its BMC could not fetch the drive): the workflow
    starts over, with a boot and a drive anew (AgentUnavailable), until its deadline."""
    refused = False

    def answers() -> bool:
        nonlocal refused
        try:
            run.agent.inventory()
        except AgentUnavailable as unavailable:
            refused = isinstance(unavailable, AgentRefusedCredentials)
            return False
        return True

    try:
        run.wait_until("the node's agent to answer", answers, settings.AGENT_BOOT_TIMEOUT)
    except StepFailed:
        if refused:
            raise AgentRefusedCredentials(f"{run.node.name}: its agent refuses this boot's credentials") from None
        raise


def power_off(run: Run) -> None:
    """Off, and whatever the service image was given opens nothing any more."""
    services.end_service_boot(node_id=run.node.pk)
    if run.bmc.power_state() != "Off":
        run.bmc.reset(RESET_FORCE_OFF)
    run.wait_until("power off", lambda: run.bmc.power_state() == "Off", settings.AGENT_BOOT_TIMEOUT)
