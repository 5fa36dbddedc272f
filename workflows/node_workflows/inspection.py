"""Inspection's steps: the firmware checked against its baseline (and repaired once), the
inventory against the enrolled one, diagnostics, and attestation.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from attestation import services as attestation_services
from attestation import verifier
from core import clock
from fleet import diagnostics, firmware, selectors, services
from fleet.lifecycle import Event, State
from fleet.models import GPU, AuditEvent, Node
from fleet.workflow_steps import StepName
from workflows.agent import AgentCannot, AgentError
from workflows.node_workflows.booting import boot_service_image, wait_for_agent
from workflows.node_workflows.handoff import networks_read_back
from workflows.node_workflows.run import DiagnosticFailed, FirmwareDrift, GoOnAt, NotYet, Run, StepFailed, handed_on
from workflows.node_workflows.wiping import wait_for_tasks
from workflows.redfish import BMCPermanentError

log = logging.getLogger(__name__)


@functools.cache
def _warn_of_nodes_without_baseline() -> None:
    """Once a process: firmware is not checked where no baseline applies (a fleet that has none yet)."""
    log.warning(
        "a node without a firmware baseline is inspected without a firmware check: "
        "set baselines in the admin or with manage.py set_firmware_baseline"
    )


def _read_firmware(run: Run) -> firmware.Found:
    bios_attributes, secure_boot = run.bmc.bios_and_secure_boot()
    return firmware.Found(
        components=firmware.installed_components(
            run.bmc.firmware_inventory(), system=run.bmc.system_path, managers=run.bmc.managers()
        ),
        bios_attributes=bios_attributes,
        secure_boot=firmware.secure_boot(secure_boot),
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
        return GoOnAt(StepName.CHECK_INVENTORY)
    found = _read_firmware(run)
    drifts = firmware.compare(baseline, found)
    if not drifts:
        services.record_firmware_check(node=run.node, actor=run.actor, baseline=baseline.name, found=found, repaired=[])
        return GoOnAt(StepName.CHECK_INVENTORY)
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
    repair = handed_on(run)
    drifts = "; ".join(repair["drifts"])

    def reflash_failed(why: str) -> FirmwareDrift:
        return FirmwareDrift(f"{drifts}; the reflash of {why}")

    try:
        wait_for_tasks(
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
    repair = handed_on(run)
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
    started = handed_on(run)
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


def to_appraise(node: Node) -> attestation_services.NodeToAppraise:
    """What attestation needs to know of the node: who it is, the GPUs it must have, its class and
    the releases its class may boot; and for the signed result, the firmware this inspection found
    it running (and repaired), and its fabric memberships as last read back: off the previous
    tenant's networks before the next tenant gets it."""
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
        networks=networks_read_back(node),
    )


def attest(run: Run) -> None:
    """Evidence bound to a fresh nonce, verified, signed, stored, and acted on in one transaction."""
    node = to_appraise(run.node)
    try:
        verifying = attestation_services.ready_to_appraise(node)
        issued_at, issued = clock.now(), time.monotonic()
        nonce = verifier.new_nonce(issued_at)
        try:
            evidence = run.agent.evidence(nonce)
        except AgentError as error:  # an agent that refuses to attest fails attestation: fail closed
            evidence = {"refused": str(error)}
        out_of_band = "out_of_band" in verifying.policy.gpu_evidence
        bmc_evidence = run.bmc.gpu_spdm_evidence(nonce) if out_of_band else None
        # One clock read for the step: the appraisal's now is the nonce's issue plus the time the
        # agent and the BMC took, timed here.
        now = issued_at + timedelta(seconds=time.monotonic() - issued)
        appraisal = attestation_services.appraise(
            node=node, verifying=verifying, evidence=evidence, nonce=nonce, now=now, bmc_evidence=bmc_evidence
        )
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
