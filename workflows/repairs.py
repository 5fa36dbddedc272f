"""Repairs the remediation rules call for, driven through the node's agent: today a GPU reset.

Each look is one short step, sent by the reconciler when the repair is due (the due time is in
the database: remediation.services.take_due_repairs): start the reset, or see how it went and
hand the outcome to remediation.services, which keeps the node or quarantines it.
"""

from __future__ import annotations

from remediation import services
from remediation.models import Remediation, RemediationStatus
from workflows.agent import AgentError, AgentUnavailable
from workflows.node_workflows import agent_client


def look_at_gpu_reset(remediation_id: int) -> str:
    """Start the GPU reset, or see how it went. An agent that cannot do it or tell counts as a
    reset that did not help: the GPU is quarantined (under the blast-radius cap)."""
    remediation = Remediation.objects.select_related("node").get(pk=remediation_id)
    if remediation.status != RemediationStatus.PENDING:
        return remediation.status
    agent = agent_client(remediation.node)
    try:
        if remediation.step_started_at is None:
            agent.start_gpu_reset(remediation.gpu)
            services.gpu_reset_started(remediation_id=remediation_id)
            return "reset started"
        reset = agent.gpu_reset()
        if reset.get("state") == "running" and not services.gpu_reset_overdue(remediation):
            services.gpu_reset_running(remediation_id=remediation_id)
            return "reset running"
        if reset.get("state") != "succeeded" or reset.get("gpu") != remediation.gpu:
            why = f"the reset {reset.get('state')}: {reset.get('detail') or 'no detail'}"
            return services.gpu_reset_finished(remediation_id=remediation_id, healthy=False, why=why).status
        healthy = agent.gpu_healthy(remediation.gpu)
    except (AgentUnavailable, AgentError) as error:
        why = f"the agent could not reset it: {error}"
        return services.gpu_reset_finished(remediation_id=remediation_id, healthy=False, why=why).status
    finally:
        agent.close()
    return services.gpu_reset_finished(remediation_id=remediation_id, healthy=healthy).status
