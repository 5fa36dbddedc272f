"""The control plane's hands: inspection, provisioning and wipe, as sequences of idempotent steps.

A worker claims a node under a lease (fleet/leases.py), runs the workflow its state calls for
from the step the node is on, records each step, heartbeats through every wait, and applies
the outcome as a lifecycle event through the fenced update. When that outcome owes more work
(a wipe is followed by inspection) the worker keeps the node and goes straight on, with the
same BMC connection and what it learnt of the BMC. BMC and agent calls happen outside any
database transaction. A step that meets a transient fault gives the node back unchanged;
the reconciler enqueues it again and the workflow resumes at that step, until its deadline.

Hardware that takes long, or hangs, must not hold a worker: a wait that outlasts
WORKFLOW_HOLD_SECONDS parks the node (fleet/leases.py) until it is due to be checked again,
and the worker moves on. The reconciler sends the node again when that hold expires. All a
wait needs is in the database, so neither Redis nor the worker has anything to lose: the step,
when the step began (its timeout counts from then) and, in the step's audit row, what it waits
on. No countdown message is used: a Celery worker holds those in memory until they are due,
and kombu's Redis transport cannot give them back when the broker restarts (the worker dies).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_interface, ip_network

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from attestation import services as attestation_services
from attestation import verifier
from fleet import diagnostics, firmware, leases, lifecycle, selectors, services
from fleet.leases import Lease, LeaseLost, record_discarded_result
from fleet.lifecycle import Event, State
from fleet.models import GPU, AuditEvent, AuditOnlyEvent, IdleDiagnosticRun, IdleDiagnosticStatus, Node
from reservations.models import Reservation
from workflows import idle_diagnostics
from workflows.agent import AgentCannot, AgentError, AgentUnavailable
from workflows.clients import BMC, HARDWARE, Agent, Clients
from workflows.config_drive import NoCloudConfig
from workflows.redfish import (
    RESET_FORCE_OFF,
    RESET_FORCE_RESTART,
    RESET_GRACEFUL_RESTART,
    RESET_ON,
    RESET_POWER_CYCLE,
    BMCPermanentError,
    BMCTransientError,
)

log = logging.getLogger(__name__)


class StepFailed(Exception):
    """The workflow cannot succeed: apply its failure event with this reason."""

    event: lifecycle.Event | None = None  # another event than the workflow's failure, whose reason says it all


class DiagnosticFailed(StepFailed):
    """A diagnostics test failed: apply diagnostic_failed, with the test and GPU as the reason."""

    event = Event.DIAGNOSTIC_FAILED


class FirmwareDrift(StepFailed):
    """The node is off its firmware baseline and no repair brings it back (none can, or one
    failed): apply firmware_drift, naming each component, what was expected and what was found."""

    event = Event.FIRMWARE_DRIFT


@dataclass(frozen=True)
class GoOnAt:
    """What a step returns when the steps after it, up to `step`, have nothing to do: a firmware
    check that finds nothing to repair goes on past the repair."""

    step: Callable[[Run], object]


class NotYet(Exception):
    """A step cannot finish now (transient fault, or waiting on something): give the node back."""


class Waiting(Exception):
    """A wait outlasted the worker's hold: park the node and look again in `recheck_in` seconds."""

    def __init__(self, what: str, recheck_in: float):
        super().__init__(f"still waiting for {what}; again in {recheck_in:.1f}s")
        self.recheck_in = recheck_in


@dataclass
class Run:
    """One worker's run of one node's workflow."""

    node: Node
    lease: Lease
    actor: str
    bmc: BMC
    agent: Agent
    step: str = ""
    last_heartbeat: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    database_seconds: float = 0.0
    next_lease: Lease | None = None  # kept for the work the outcome calls for next

    def __post_init__(self):
        # The clients serve every workflow of a worker's visit; figures are per workflow.
        self._bmc_before = (self.bmc.calls, self.bmc.seconds)
        self._agent_before = (self.agent.calls, self.agent.seconds)

    def time_queries(self, execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.database_seconds += time.perf_counter() - began

    def figures(self) -> dict:
        """Where this run's time went, recorded with its outcome in the audit log."""
        return {
            "seconds": round(time.monotonic() - self.started, 3),
            "bmc_seconds": round(self.bmc.seconds - self._bmc_before[1], 3),
            "agent_seconds": round(self.agent.seconds - self._agent_before[1], 3),
            "database_seconds": round(self.database_seconds, 3),
            "redfish_calls": self.bmc.calls - self._bmc_before[0],
            "agent_calls": self.agent.calls - self._agent_before[0],
        }

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_heartbeat >= settings.LEASE_SECONDS / 3:
            try:
                leases.heartbeat(self.lease)
            except LeaseLost:
                # A stalled worker waking up after a successor took over: what it did is void.
                record_discarded_result(lease=self.lease, attempted=f"step {self.step}", actor=self.actor)
                raise
            self.last_heartbeat = time.monotonic()

    def wait_until(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Poll `done` until it is true, heartbeating. The wait counts from when its step began,
        across visits: StepFailed once `timeout` seconds have passed since then, Waiting once it
        has outlasted the hold (checked again after a quarter of the time waited so far)."""
        began = None
        while True:
            self.heartbeat()  # first: a worker that was stalled must not touch the machine again
            if done():
                return
            if began is None:  # read only for a wait that did not end at once
                began = Node.objects.values_list("step_since", flat=True).get(pk=self.node.pk)
            waited = (timezone.now() - began).total_seconds()
            if waited >= timeout:
                raise StepFailed(f"timed out after {timeout:g}s waiting for {what}")
            if waited >= settings.WORKFLOW_HOLD_SECONDS:
                backoff = max(waited / 4, settings.WORKFLOW_POLL_SECONDS)
                raise Waiting(what, min(backoff, settings.WORKFLOW_RECHECK_MAX_SECONDS, timeout - waited))
            time.sleep(settings.WORKFLOW_POLL_SECONDS)


# -- steps -----------------------------------------------------------------------------------


def _handed_on(run: Run) -> dict:
    """What the step before handed on to the current one: kept in the current step's audit row,
    for whichever visit resumes it."""
    current = AuditEvent.objects.filter(node_id=run.node.pk, event=AuditOnlyEvent.STEP_CHANGED, reason=run.step)
    return current.latest("id").detail


def _boot_image(run: Run, image_url: str) -> None:
    run.bmc.insert_media(image_url)
    run.bmc.set_boot_override("Cd", "Once")
    run.bmc.reset(RESET_FORCE_RESTART if run.bmc.power_state() == "On" else RESET_ON)


def boot_service_image(run: Run) -> None:
    """Boot the control plane's own image (inspection, wipe), which runs the agent."""
    _boot_image(run, settings.SERVICE_IMAGE_URL)


def _reinstalling(node: Node) -> bool:
    """Whether the node's current provisioning is a tenant's reinstall."""
    entered = (
        AuditEvent.objects.filter(node_id=node.pk, to_state=State.PROVISIONING)
        .exclude(from_state=State.PROVISIONING)
        .latest("id")
    )
    return entered.event == Event.REINSTALL_REQUESTED


def stop_idle_diagnostics(run: Run) -> None:
    """Placement wants the node: first of all, stop the diagnostics it was running while idle
    (workflows/idle_diagnostics.py), so that the reservation waits on nothing."""
    idle = selectors.running_idle_diagnostics(node_id=run.node.pk)
    if idle is not None:
        idle_diagnostics.preempt(idle, run.agent, why="placement wants the node")


def erase_drives_if_reinstalling(run: Run) -> dict:
    """A reinstall erases the node's drives first, powered off: a new image on an old disk would
    keep the tenant's old data (and whatever it left there). A first provisioning has nothing to erase."""
    if not _reinstalling(run.node):
        return {"monitors": {}}
    power_off(run)
    return start_drive_erase(run)


def _tenant_image(node: Node):
    """What the node boots for its tenant: the image a reinstall chose, else its reservation's."""
    return node.reinstall_image or Reservation.objects.select_related("image").get(pk=node.reservation_id).image


def prepare_config_drive(run: Run) -> None:
    """The node's address on the tenant network, and its config drive: the tenant's keys and
    user data, its name and address, for cloud-init. Both stay until the node stops serving."""
    reservation = Reservation.objects.prefetch_related("ssh_keys").get(pk=run.node.reservation_id)
    try:
        address = services.assign_address(node_id=run.node.pk)
    except services.NoAddressFree as full:
        raise StepFailed(str(full)) from full

    def build() -> bytes:
        network = ip_network(address.pool.network) if address else None
        return NoCloudConfig(
            # Each provisioning, a reinstall's too, is a new instance to cloud-init.
            instance_id=f"{run.node.name}-r{reservation.pk}-{run.lease.token}",
            hostname=run.node.name,
            ssh_public_keys=tuple(key.public_key for key in reservation.ssh_keys.order_by("name")),
            user_data=reservation.user_data,
            interface=ip_interface(f"{address.address}/{network.prefixlen}") if address else None,
            gateway=address.pool.gateway if address else None,
            mac=None,
        ).iso()

    services.config_drive_token(node_id=run.node.pk, build=build)


def boot_tenant_image(run: Run) -> None:
    """The reservation's image in the CD, the config drive beside it as a USB stick; boot the CD."""
    image = _tenant_image(run.node)
    token = selectors.config_drive_token(node_id=run.node.pk)
    run.bmc.insert_media(f"{settings.CONFIG_DRIVE_BASE_URL}/v1/config-drives/{token}", removable=True)
    _boot_image(run, image.url if image else settings.TENANT_IMAGE_URL)


def enable_secure_boot_for_image(run: Run) -> None:
    """An image that needs Secure Boot gets it: SecureBootEnable set if it is off, which takes effect
    at the boot that follows. Any other image leaves Secure Boot as it is (a firmware baseline,
    checked at inspection, may require it on)."""
    image = _tenant_image(run.node)
    if image is not None and image.needs_secure_boot and not firmware.secure_boot(run.bmc.secure_boot()).enabled:
        run.bmc.enable_secure_boot()


def check_booted_image(run: Run) -> None:
    """The node booted the image the catalogue names, checksum for checksum; and its SSH host key,
    for the tenant to check on first login. A reservation without an image (an older one, or a
    fleet without a catalogue) boots GPUFLEET_TENANT_IMAGE_URL unchecked."""
    image = _tenant_image(run.node)
    try:
        inventory = run.agent.inventory()
    except AgentError as error:
        raise StepFailed(f"inventory unreadable: {error}") from error
    if inventory.get("boot_image_hashing"):
        raise NotYet("the node is still hashing the medium it booted")
    booted = inventory.get("boot_image_sha256")
    if image is not None and booted != image.sha256:
        raise StepFailed(f"booted an image with SHA-256 {booted}, not {image.name}'s {image.sha256}")
    host_keys = [k for k in inventory.get("ssh_host_keys", []) if isinstance(k, dict)]
    preferred = sorted(host_keys, key=lambda k: k.get("type") != "ssh-ed25519")
    if preferred and isinstance(fingerprint := preferred[0].get("fingerprint"), str):
        services.record_host_key(node_id=run.node.pk, fingerprint=fingerprint[:128])


def check_secure_boot_for_image(run: Run) -> None:
    """An image that needs Secure Boot was booted with Secure Boot running, as the BMC reports the
    boot (SecureBootCurrentBoot). Else provisioning fails naming why, and the reservation gets
    another node: enabled is not running when no platform key is enrolled (SecureBootMode SetupMode)."""
    image = _tenant_image(run.node)
    if image is None or not image.needs_secure_boot:
        return
    resource = run.bmc.secure_boot()
    found = firmware.secure_boot(resource)
    if found.current_boot != "Enabled":
        raise StepFailed(
            f"{image.name} needs Secure Boot, but the node booted with it {found.current_boot or 'unreported'}"
            f" (SecureBootEnable {str(found.enabled).lower()}, SecureBootMode {resource.get('SecureBootMode', '?')})"
        )


def wait_for_agent(run: Run) -> None:
    def answers() -> bool:
        try:
            run.agent.inventory()
        except AgentUnavailable:
            return False
        return True

    run.wait_until("the node's agent to answer", answers, settings.AGENT_BOOT_TIMEOUT)


@functools.cache
def _warn_of_nodes_without_baseline() -> None:
    """Once a process: firmware is not checked where no baseline applies (a fleet that has none yet)."""
    log.warning(
        "a node without a firmware baseline is inspected without a firmware check: "
        "set baselines in the admin or with manage.py set_firmware_baseline"
    )


def _read_firmware(run: Run) -> firmware.Found:
    return firmware.Found(
        components=firmware.installed_components(
            run.bmc.firmware_inventory(), system=run.bmc.system_path, managers=run.bmc.managers()
        ),
        bios_attributes=run.bmc.bios_attributes(),
        secure_boot=firmware.secure_boot(run.bmc.secure_boot()),
    )


def check_firmware(run: Run) -> dict | GoOnAt:
    """Compare the node's firmware, BIOS attributes and Secure Boot, as its BMC reports them, with
    its class's baseline. A node that runs the baseline goes on to check_inventory. A drift the
    baseline can repair starts the repair: each drifting component flashed with the baseline's
    image (the task monitors go to the next step), the BIOS settings patched, Secure Boot enabled.
    Any other drift quarantines the node at once, left as it was found for whoever looks at it."""
    baseline = selectors.firmware_baseline_for(node_id=run.node.pk)
    if baseline is None:
        _warn_of_nodes_without_baseline()
        return GoOnAt(check_inventory)
    found = _read_firmware(run)
    drifts = firmware.compare(baseline, found)
    if not drifts:
        services.record_firmware_check(node=run.node, actor=run.actor, baseline=baseline.name, found=found, repaired=[])
        return GoOnAt(check_inventory)
    if not all(drift.repairable for drift in drifts):
        raise FirmwareDrift(firmware.describe(drifts))
    repair = firmware.plan(baseline, found)
    monitors = {}
    try:
        for flash in repair.flashes:
            image = f"{settings.FIRMWARE_IMAGE_BASE_URL}/{flash.image}"
            if (monitor := run.bmc.simple_update(image, flash.target)) is not None:
                monitors[flash.component] = monitor
        if repair.bios_settings:
            run.bmc.set_bios_settings(dict(repair.bios_settings))
        if repair.enable_secure_boot:
            run.bmc.enable_secure_boot()
    except BMCPermanentError as refused:
        raise FirmwareDrift(f"{firmware.describe(drifts)}; the BMC refused the repair: {refused}") from refused
    log.info("%s: repairing firmware drift: %s", run.node.name, firmware.describe(drifts))
    return {
        "drifts": [str(drift) for drift in drifts],
        "repairing": [drift.component for drift in drifts],
        "monitors": monitors,
        "reboot": repair.reboot,
    }


def finish_firmware_update(run: Run) -> dict:
    """Wait for every flash check_firmware started, then boot the service image again if the repair
    takes effect at boot (a BIOS flash, BIOS settings, Secure Boot). A flash that fails or outlasts
    GPUFLEET_FIRMWARE_UPDATE_TIMEOUT fails the repair: firmware_drift."""
    repair = _handed_on(run)
    drifts = "; ".join(repair["drifts"])

    def reflash_failed(why: str) -> FirmwareDrift:
        return FirmwareDrift(f"{drifts}; the reflash of {why}")

    try:
        _wait_for_tasks(
            run, repair["monitors"], "the firmware updates", settings.FIRMWARE_UPDATE_TIMEOUT, reflash_failed
        )
    except FirmwareDrift:
        raise
    except StepFailed as timed_out:
        raise FirmwareDrift(f"{drifts}; {timed_out}") from timed_out
    if repair["reboot"]:
        boot_service_image(run)
    return {"drifts": repair["drifts"], "repairing": repair["repairing"]}


def recheck_firmware(run: Run) -> None:
    """Once the repaired node's agent answers again, read its firmware again: one repair is all it
    gets, and whatever still drifts quarantines it. A node that runs its baseline now has what was
    repaired in its firmware_checked audit row, and in its signed attestation result."""
    repair = _handed_on(run)
    wait_for_agent(run)
    baseline = selectors.firmware_baseline_for(node_id=run.node.pk)
    if baseline is None:  # taken away during the repair
        _warn_of_nodes_without_baseline()
        return
    found = _read_firmware(run)
    if drifts := firmware.compare(baseline, found):
        raise FirmwareDrift(f"{firmware.describe(drifts)} (after repairing {', '.join(repair['repairing'])})")
    services.record_firmware_check(
        node=run.node, actor=run.actor, baseline=baseline.name, found=found, repaired=repair["repairing"]
    )


def check_inventory(run: Run) -> None:
    """Compare what the node reports with what was enrolled; any missing or changed GPU fails it."""
    try:
        found = {g.get("index"): g for g in run.agent.inventory().get("gpus", []) if isinstance(g, dict)}
    except AgentError as error:
        raise StepFailed(f"inventory unreadable: {error}") from error
    problems = []
    for gpu in GPU.objects.filter(node=run.node).order_by("index"):
        seen = found.pop(gpu.index, None)
        if seen is None:
            problems.append(f"GPU {gpu.index} ({gpu.uuid}) missing")
        elif seen.get("uuid") != gpu.uuid or (gpu.serial and seen.get("serial") != gpu.serial):
            problems.append(f"GPU {gpu.index} changed: enrolled {gpu.uuid}, found {seen.get('uuid')}")
    problems.extend(f"GPU {index} ({g.get('uuid')}) not enrolled" for index, g in sorted(found.items(), key=str))
    if problems:
        raise StepFailed("; ".join(problems))
    services.complete(
        run.lease,
        event=Event.INSPECTION_PASSED,
        actor=run.actor,
        reason="inventory matches enrolment",
        detail=run.figures(),
    )


def _returning_to_service(node: Node) -> bool:
    """Whether this inspection follows an operator's return from quarantine or maintenance. The way
    back is operator_return -> wiping -> inspecting, and no other event enters wiping from those
    states, so the audit log says it: no flag to set at the return and to clear after."""
    entered_wiping = (
        AuditEvent.objects.filter(node_id=node.pk, to_state=State.WIPING)
        .exclude(from_state=State.WIPING)
        .order_by("-id")
        .values_list("event", flat=True)
        .first()
    )
    return entered_wiping == Event.OPERATOR_RETURN


def start_diagnostics(run: Run) -> dict:
    """The short diagnostics level at every inspection; the long one, as burn-in, when the node
    comes back from quarantine or maintenance. An agent that cannot run them (a server without
    DCGM) is let be, and no pass is recorded."""
    level = diagnostics.LONG if _returning_to_service(run.node) else diagnostics.SHORT
    try:
        started = run.agent.start_diagnostics(level)
    except AgentCannot as cannot:
        log.info("%s: no diagnostics: %s", run.node.name, cannot)
        return {"level": None}
    except AgentError as error:
        raise StepFailed(f"diagnostics refused: {error}") from error
    return {"level": level, "started_at": started.get("started_at")}


def wait_for_diagnostics(run: Run) -> None:
    """Wait for the run start_diagnostics started (its level and start, in this step's audit row,
    for whichever visit resumes the wait); record the pass, or fail naming the test and GPU."""
    started = _handed_on(run)
    level = started["level"]
    if level is None:
        return
    answer: dict = {}

    def finished() -> bool:
        nonlocal answer
        answer = run.agent.diagnostics()
        return answer.get("state") != "running"

    run.wait_until(f"the level {level} diagnostics", finished, settings.DIAGNOSTICS_TIMEOUT)
    if answer.get("started_at") != started["started_at"]:
        raise StepFailed(f"the agent no longer has the level {level} run it started (its last: {answer.get('state')})")
    if answer.get("state") != "succeeded":
        raise StepFailed(f"the level {level} diagnostics run ended {answer.get('state')}, without results")
    if failed := diagnostics.failed_tests(answer.get("results")):
        raise DiagnosticFailed(diagnostics.verdict(failed))
    services.record_diagnostics_pass(node_id=run.node.pk, level=level)


def _to_appraise(node: Node) -> attestation_services.NodeToAppraise:
    """What attestation needs to know of the node: who it is, the GPUs it must have, its class and
    the releases its class may boot, and the firmware this inspection found it running (and
    repaired), for the signed result."""
    gpus = list(GPU.objects.filter(node=node).order_by("index"))
    baseline = selectors.firmware_baseline_for(node_id=node.pk)
    return attestation_services.NodeToAppraise(
        identity=verifier.NodeIdentity(
            name=node.name,
            serial=node.serial,
            gpus=tuple(verifier.GPUIdentity(gpu.index, gpu.uuid, gpu.serial) for gpu in gpus),
        ),
        gpu_models=frozenset(gpu.model for gpu in gpus),
        firmware=selectors.firmware_checked_in_this_state(node),
        boot_releases=baseline.boot_releases if baseline is not None else (),
    )


def attest(run: Run) -> None:
    """Evidence bound to a fresh nonce, verified, signed, stored, and acted on in one transaction."""
    nonce = verifier.new_nonce(timezone.now())
    try:
        evidence = run.agent.evidence(nonce)
    except AgentError as error:  # an agent that refuses to attest fails attestation: fail closed
        evidence = {"refused": str(error)}
    try:
        appraisal = attestation_services.appraise(node=_to_appraise(run.node), evidence=evidence, nonce=nonce)
    except attestation_services.NotConfigured as missing:
        raise NotYet(f"attestation: {missing}") from missing
    event = Event.ATTESTATION_PASSED if appraisal.verdict.affirming else Event.ATTESTATION_FAILED
    with transaction.atomic():
        result = attestation_services.record(node_id=run.node.pk, nonce=nonce, appraisal=appraisal)
        services.complete(
            run.lease,
            event=event,
            actor=run.actor,
            reason=attestation_services.summary(appraisal.verdict),
            detail={**run.figures(), "attestation_result": result.pk},
        )


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

    monitors = _handed_on(run)["monitors"]
    _wait_for_tasks(run, monitors, "the secure erase of every drive", settings.WIPE_TIMEOUT, erase_failed)


def _wait_for_tasks(
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


def eject_media(run: Run) -> None:
    run.bmc.eject_media()


def clear_boot_override(run: Run) -> None:
    run.bmc.clear_boot_override()


def power_off(run: Run) -> None:
    if run.bmc.power_state() != "Off":
        run.bmc.reset(RESET_FORCE_OFF)
    run.wait_until("power off", lambda: run.bmc.power_state() == "Off", settings.AGENT_BOOT_TIMEOUT)


@dataclass(frozen=True)
class Workflow:
    steps: tuple[Callable[[Run], dict | None], ...]
    succeeded: lifecycle.Event | None  # None: the last step applies the outcome itself
    failed: lifecycle.Event
    deadline_setting: str  # how long the node may stay in this state, all retries included


WORKFLOWS: dict[lifecycle.State, Workflow] = {
    State.INSPECTING: Workflow(
        steps=(
            boot_service_image,
            wait_for_agent,
            check_firmware,
            finish_firmware_update,
            recheck_firmware,
            check_inventory,
            start_diagnostics,
            wait_for_diagnostics,
            attest,
        ),
        succeeded=None,
        failed=Event.INSPECTION_FAILED,
        deadline_setting="INSPECTION_DEADLINE",
    ),
    State.PROVISIONING: Workflow(
        steps=(
            stop_idle_diagnostics,
            erase_drives_if_reinstalling,
            wait_for_drive_erase,
            prepare_config_drive,
            enable_secure_boot_for_image,
            boot_tenant_image,
            wait_for_agent,
            check_secure_boot_for_image,
            check_booted_image,
        ),
        succeeded=Event.PROVISION_SUCCEEDED,
        failed=Event.PROVISION_FAILED,
        deadline_setting="PROVISION_DEADLINE",
    ),
    State.WIPING: Workflow(
        steps=(
            boot_service_image,
            wait_for_agent,
            start_gpu_wipe,
            wait_for_gpu_wipe,
            start_drive_erase,
            wait_for_drive_erase,
            eject_media,
            clear_boot_override,
            power_off,
        ),
        succeeded=Event.WIPE_SUCCEEDED,
        failed=Event.WIPE_FAILED,
        deadline_setting="WIPE_DEADLINE",
    ),
}


def _remaining_steps(workflow: Workflow, run: Run) -> tuple[Callable[[Run], dict | None], ...]:
    """Resume where a paused run stopped. After a worker died or stalled mid-step, start over:
    nobody knows what it left the machine doing, and every step is safe to repeat."""
    names = [step.__name__ for step in workflow.steps]
    if run.lease.took_over or run.node.step not in names:
        return workflow.steps
    return workflow.steps[names.index(run.node.step) :]


def run_workflow(*, node_id: int, worker: str, clients: Clients = HARDWARE) -> str:
    """Claim the node if it owes work and nobody holds it, and run its workflows until it owes
    none or waits on its hardware, through `clients`. Returns what happened, one outcome per workflow."""
    claimed = leases.claim(owner=worker, node_ids=[node_id])
    if not claimed:
        return "not claimed"
    lease = claimed[0]
    node = Node.objects.get(pk=node_id)
    bmc = clients.bmc(node)
    agent = clients.agent(node)
    outcomes = []
    try:
        while lease is not None:
            run = Run(node=node, lease=lease, actor=f"worker:{worker}", bmc=bmc, agent=agent)
            try:
                with connection.execute_wrapper(run.time_queries):
                    outcomes.append(_run_steps(run, WORKFLOWS[lifecycle.State(node.state)]))
            except LeaseLost:
                outcomes.append("lease lost")
            lease = run.next_lease
            if lease is not None:
                node = Node.objects.get(pk=node_id)
    finally:
        bmc.close()
        agent.close()
    return ", ".join(outcomes)


def _run_steps(run: Run, workflow: Workflow) -> str:
    deadline = getattr(settings, workflow.deadline_setting)
    current = run.node.step or "start"
    try:
        waited = (timezone.now() - run.node.state_since).total_seconds()
        if waited > deadline:
            raise StepFailed(f"still {run.node.state} after {waited:.0f}s (deadline {deadline:g}s, retries included)")
        handed_on = None  # what a step returned for the next one: audited with it, read from there
        go_on_at = None  # the step to go on at, past those with nothing to do
        for step in _remaining_steps(workflow, run):
            if go_on_at is not None and step.__name__ != go_on_at.__name__:
                continue
            current = run.step = step.__name__
            if not leases.set_step(run.lease, step=current, actor=run.actor, detail=handed_on):
                return "lease lost"
            handed_on, go_on_at = step(run), None
            if isinstance(handed_on, GoOnAt):
                handed_on, go_on_at = None, handed_on.step
    except (StepFailed, BMCPermanentError) as failure:
        event, reason = workflow.failed, f"{current}: {failure}"
        if isinstance(failure, StepFailed) and failure.event is not None:
            event, reason = failure.event, str(failure)
        log.warning("%s: %s failed at %s", run.node.name, run.node.state, reason)
        run.next_lease = _complete_and_go_on(run, event=event, reason=reason)
        return event.value
    except Waiting as wait:
        log.info("%s: %s at %s: %s", run.node.name, run.node.state, current, wait)
        if not leases.park(run.lease, seconds=wait.recheck_in):
            record_discarded_result(lease=run.lease, attempted=f"park at {current}", actor=run.actor)
            return "lease lost"
        return f"waiting at {current}"
    except (NotYet, BMCTransientError, AgentUnavailable, AgentError) as pause:
        log.info("%s: %s paused at %s: %s", run.node.name, run.node.state, current, pause)
        first = workflow.steps[0].__name__
        if isinstance(pause, AgentUnavailable) and current != first:
            # The agent answered earlier in this workflow and now does not: the machine rebooted
            # or lost power under us, and what it had booted is gone. Resuming here would wait for
            # an agent that never comes back; the next run starts over.
            leases.set_step(run.lease, step=first, actor=run.actor)
        if not leases.release(run.lease):
            record_discarded_result(lease=run.lease, attempted=f"pause at {current}", actor=run.actor)
            return "lease lost"
        return f"paused at {current}"
    if workflow.succeeded is not None:
        run.next_lease = _complete_and_go_on(run, event=workflow.succeeded)
        return workflow.succeeded.value
    return "done"


def _complete_and_go_on(run: Run, *, event: lifecycle.Event, reason: str = "") -> Lease | None:
    """Apply the outcome and, if it owes more work (a wipe is followed by inspection), claim the
    node again in the same transaction: no other worker is sent it, and this one keeps its BMC
    connection and what it learnt of the BMC."""
    with transaction.atomic():
        node = services.complete(run.lease, event=event, actor=run.actor, reason=reason, detail=run.figures())
        return leases.reclaim(run.lease) if node is not None else None


# -- tenants' power actions -----------------------------------------------------------------------

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


# -- diagnostics on idle nodes ----------------------------------------------------------------------


def look_at_idle_diagnostics(run_id: int, clients: Clients = HARDWARE) -> str:
    """One look at a diagnostics run on an idle node (workflows/idle_diagnostics.py); its status after."""
    run = IdleDiagnosticRun.objects.select_related("node").get(pk=run_id)
    if run.status != IdleDiagnosticStatus.RUNNING:
        return run.status
    agent = clients.agent(run.node)
    try:
        return idle_diagnostics.look(run, agent)
    finally:
        agent.close()
