"""The wipe's steps: the node taken off its tenant's networks first, then the GPUs wiped by the
agent, every drive securely erased by the BMC, and the console log cleared where the BMC can."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from fleet.services import network_attachments
from workflows import fabric_sync
from workflows.agent import AgentError
from workflows.node_workflows.run import Run, StepFailed, Waiting, handed_on
from workflows.redfish import BMCPermanentError


def leave_tenant_networks(run: Run) -> None:
    """Wait until the fabrics were read back holding the node on no tenant's network, before the
    wipe touches it: until then it is held out of placement (network_cleanup_pending). This wait
    has no timeout and the wipe's deadline does not run while the node is at this step (the
    engine's Workflow.unbounded_first_step): a manager down for an hour must not quarantine the
    node, which is safe where it stands. The last tenant cannot reach it once this step ends."""
    node_id = run.node.pk
    wait_for_fabrics(
        run,
        "its removal from its tenant's networks read back",
        lambda: not network_attachments.removal_pending(node_id=node_id),
    )


def join_provisioning_network(run: Run) -> None:
    """The node was reset into the service image: its last tenant's OS is gone, and its Ethernet
    port goes from no VLAN at all (isolated since it stopped serving) to the provisioning VLAN,
    where the control plane reaches the service image's agent. Waits for the read-back."""
    node_id = run.node.pk
    network_attachments.join_provisioning_network(node_id=node_id)
    wait_for_fabrics(
        run,
        "its port read back on the provisioning VLAN",
        lambda: network_attachments.networks_confirmed(node_id=node_id),
    )


def wait_for_fabrics(run: Run, what: str, done: Callable[[], bool]) -> None:
    """Park the node until `done`, holding no worker: it waits on a sync (workflows/fabric_sync.py),
    which may queue behind this very worker's messages, and which wakes the node once it has read
    its memberships back. A sync is sent each time it is still waiting; the park's recheck, a
    quarter of the time waited so far, is the fallback."""
    if done():
        return
    fabric_sync.request_sync()
    raise Waiting(what)


def start_gpu_wipe(run: Run) -> None:
    try:
        if run.agent.gpu_wipe_state() != "running":
            run.agent.start_gpu_wipe()
    except AgentError as error:
        raise StepFailed(f"GPU memory wipe refused: {error}") from error


def wait_for_gpu_wipe(run: Run) -> None:
    def finished() -> bool:
        state = run.agent.gpu_wipe_state()
        if state == "failed":
            raise StepFailed("GPU memory wipe failed")
        return state == "succeeded"

    run.wait_until("the GPU memory wipe", finished, settings.WIPE_TIMEOUT)


def start_drive_erase(run: Run) -> dict:
    """Start a secure erase of every drive at once. The BMC refuses a second erase of a drive
    while one runs, so the task monitors go with the next step's audit row, for whichever
    visit resumes the wait."""
    monitors = {}
    for drive in run.bmc.drives():
        if (monitor := run.bmc.secure_erase(drive)) is not None:
            monitors[drive] = monitor
    return {"monitors": monitors}


def wait_for_drive_erase(run: Run) -> None:
    def erase_failed(why: str) -> StepFailed:
        return StepFailed(f"secure erase of {why}")

    monitors = handed_on(run)["monitors"]
    wait_for_tasks(run, monitors, "the secure erase of every drive", settings.WIPE_TIMEOUT, erase_failed)


def clear_console_log(run: Run) -> dict:
    """Clear the console log (LogService.ClearLog) so that no later tenant reads what this one's
    OS printed; the tenant's view of the log starts at its tenancy anyway (workflows/api/views.py),
    so a BMC that cannot clear it, or refuses to, fails no wipe."""
    try:
        cleared = run.bmc.clear_console_log()
    except BMCPermanentError as error:
        return {"console_log": f"not cleared: {error}"}
    return {"console_log": "cleared" if cleared else "the BMC offers no LogService.ClearLog for it"}


def wait_for_tasks(
    run: Run, monitors: dict[str, str], what: str, timeout: float, failed: Callable[[str], StepFailed]
) -> None:
    """Wait until every Redfish task in `monitors` (name -> task monitor) has completed; one that
    ends otherwise raises failed("<name> ended <state>")."""
    pending = dict(monitors)

    def finished() -> bool:
        for name, monitor in list(pending.items()):
            done, state = run.bmc.task_status(monitor)
            if done and not state.startswith("Completed"):
                raise failed(f"{name} ended {state}")
            if done:
                del pending[name]
        return not pending

    run.wait_until(what, finished, timeout)
