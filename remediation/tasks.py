from celery import shared_task
from django.conf import settings

from fleet.agent import AgentClient, AgentUnavailable
from remediation import services
from remediation.models import Remediation


@shared_task(ignore_result=True)
def recheck_gpu(remediation_id: int) -> str:
    """Recheck a GPU the rules sent to reset: an agent that cannot tell counts as unhealthy."""
    remediation = Remediation.objects.select_related("node").get(pk=remediation_id)
    agent = AgentClient(remediation.node.name, remediation.node.agent_url, timeout=settings.BMC_TIMEOUT)
    try:
        healthy = agent.gpu_healthy(remediation.gpu)
    except AgentUnavailable:
        healthy = False
    finally:
        agent.close()
    return services.recheck_gpu(remediation_id=remediation_id, healthy=healthy).status


@shared_task(ignore_result=True)
def reconcile_remediations(limit: int = 500) -> dict:
    """Send the GPU rechecks that are due."""
    return {"rechecks_sent": services.send_due_rechecks(limit=limit)}
