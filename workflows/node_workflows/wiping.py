"""The wipe's steps: the GPUs wiped by the agent, every drive securely erased by the BMC, and
the console log cleared where the BMC can."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from workflows.agent import AgentError
from workflows.node_workflows.run import Run, StepFailed, handed_on
from workflows.redfish import BMCPermanentError


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
