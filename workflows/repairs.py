"""The repair rungs the remediation ladders call for, driven through the node's agent (a GPU
reset) or its BMC (a reboot, a power cycle).

Each look is one short step, sent by the reconciler when the repair is due (the due time is in
the database: remediation.services.take_due_repairs): start the rung, or see how it went and hand
the outcome to remediation.services, which keeps the node in service or climbs the next rung.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from core import clock
from fleet.models import Node, NodeState
from remediation import services
from remediation.models import Remediation, RemediationStatus, RemediationStep
from workflows.agent import AgentError, AgentUnavailable
from workflows.clients import BMC, agent_client, bmc_client
from workflows.redfish import RESET_FORCE_RESTART, RESET_GRACEFUL_RESTART, RESET_POWER_CYCLE, RedfishError

# The node's lifecycle states in which nothing else drives it: a workflow owns it in the others.
_REPAIRABLE = frozenset({NodeState.ACTIVE, NodeState.AVAILABLE})


def look_at_repair(remediation_id: int) -> str:
    remediation = Remediation.objects.select_related("node").get(pk=remediation_id)
    if remediation.status != RemediationStatus.PENDING:
        return remediation.status
    node = remediation.node
    assert node is not None  # a pending ladder is counted, and only a node's is (Remediation.Meta)
    if remediation.step == RemediationStep.GPU_RESET:
        return _look_at_gpu_reset(remediation, node)
    return _look_at_restart(remediation, node)


def _look_at_gpu_reset(remediation: Remediation, node: Node) -> str:
    """Start the GPU reset, or see how it went. An agent that cannot do it or tell counts as a
    reset that did not help: the ladder's next rung follows."""
    agent = agent_client(node)
    try:
        if remediation.step_started_at is None:
            assert remediation.gpu is not None  # rules.decide resets a GPU only for an alert naming one
            agent.start_gpu_reset(remediation.gpu)
            services.step_started(remediation_id=remediation.pk)
            return "reset started"
        reset = agent.gpu_reset()
        if reset.get("state") == "running" and not services.step_overdue(remediation):
            services.step_running(remediation_id=remediation.pk)
            return "reset running"
        if reset.get("state") != "succeeded" or reset.get("gpu") != remediation.gpu:
            why = f"the reset {reset.get('state')}: {reset.get('detail') or 'no detail'}"
            return services.step_finished(remediation_id=remediation.pk, healthy=False, why=why).status
        healthy = agent.gpu_healthy(remediation.gpu)
    except (AgentUnavailable, AgentError) as error:
        why = f"the agent could not reset it: {error}"
        return services.step_finished(remediation_id=remediation.pk, healthy=False, why=why).status
    finally:
        agent.close()
    return services.step_finished(remediation_id=remediation.pk, healthy=healthy).status


def _look_at_restart(remediation: Remediation, node: Node) -> str:
    """Ask the BMC for the reboot (graceful, forced if the OS ignores it) or the power cycle, or
    see whether the node came back with the GPU healthy. The agent's first answer after the BMC
    reports the reset is the verdict; no answer within REMEDIATION_REBOOT_TIMEOUT_SECONDS is a
    failed rung."""
    if node.state not in _REPAIRABLE:
        if node.state in (NodeState.QUARANTINED, NodeState.MAINTENANCE):
            return services.node_moved_on(remediation_id=remediation.pk).status
        # A workflow (provisioning, wiping, inspection) drives the node now: try again after it.
        services.step_running(remediation_id=remediation.pk)
        return f"waiting: {node.name} is {node.state}"
    bmc = bmc_client(node)
    try:
        if remediation.step_started_at is None:
            before = bmc.last_reset_time() or ""
            reboot = remediation.step == RemediationStep.REBOOT
            bmc.reset(RESET_GRACEFUL_RESTART if reboot else RESET_POWER_CYCLE)
            services.step_started(remediation_id=remediation.pk, reset_before=before)
            return f"{remediation.step} asked"
        now = clock.now()  # once per look: the timeout, then the grace before a forced restart
        if services.step_overdue(remediation, now=now):
            why = f"{node.name} not back with the GPU healthy within {settings.REMEDIATION_REBOOT_TIMEOUT_SECONDS:g}s"
            return services.step_finished(remediation_id=remediation.pk, healthy=False, why=why).status
        reset_at = bmc.last_reset_time()
        if reset_at is not None and reset_at == remediation.reset_before:
            _force_if_ignored(remediation, bmc, now=now)
            services.step_running(remediation_id=remediation.pk)
            return "waiting for the reset"
    except RedfishError as error:
        why = f"the BMC could not do it: {error}"
        return services.step_finished(remediation_id=remediation.pk, healthy=False, why=why).status
    finally:
        bmc.close()
    return _health_after_restart(remediation, node)


def _force_if_ignored(remediation: Remediation, bmc: BMC, *, now: datetime) -> None:
    """A hung OS ignores a graceful restart: after the tenants' grace, the BMC forces it, once."""
    assert remediation.step_started_at is not None  # called once the rung has started
    grace = settings.TENANT_REBOOT_GRACE_SECONDS
    waited = now - remediation.step_started_at
    ignored = waited > timedelta(seconds=grace)
    if remediation.step == RemediationStep.REBOOT and remediation.forced_at is None and ignored:
        bmc.reset(RESET_FORCE_RESTART)
        services.reboot_forced(remediation_id=remediation.pk, grace=grace, now=now)


def _health_after_restart(remediation: Remediation, node: Node) -> str:
    agent = agent_client(node)
    try:
        healthy = agent.gpu_healthy(remediation.gpu)
    except (AgentUnavailable, AgentError):
        services.step_running(remediation_id=remediation.pk)  # still booting
        return "waiting for the agent"
    finally:
        agent.close()
    return services.step_finished(remediation_id=remediation.pk, healthy=healthy).status
