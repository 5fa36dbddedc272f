"""GET /metrics/fleet: the fleet's own gauges, read from the database at scrape time; and who may
read them and django-prometheus's /metrics: Prometheus with its bearer token, or a signed-in
operator (core/prometheus_auth.py). Anyone else is a 401.

A registry of its own, apart from django-prometheus's /metrics: under gunicorn's multiprocess
mode that one only aggregates per-process counters, while these are facts of the database that
any one process can tell.
"""

from collections import defaultdict

from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import View
from django_prometheus.exports import ExportToDjangoView  # type: ignore[import-untyped]
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from console.pages.selectors import Reliability, remediation_reliability
from core.prometheus_auth import REALM, REFUSED, bearer_token, is_operator, is_prometheus_token
from fleet.models import GPU, Node, NodeState
from remediation.models import Remediation
from reservations.models import Reservation, ReservationState


class FleetCollector:
    def collect(self):
        nodes = GaugeMetricFamily("gpufleet_nodes", "Nodes by lifecycle state and pod.", labels=["state", "pod"])
        per_state: dict[str, dict[str, int]] = defaultdict(dict)
        for state, pod, count in Node.objects.values_list("state", "rack__pod__name").annotate(n=Count("id")):
            per_state[state][pod] = count
        for state in NodeState.values:  # every state, so a panel shows zeros rather than gaps
            for pod, count in (per_state[state] or {"": 0}).items():
                nodes.add_metric([state, pod], count)
        yield nodes

        unhealthy = GaugeMetricFamily("gpufleet_gpus", "GPUs by recorded health.", labels=["health"])
        for health, count in GPU.objects.values_list("health").annotate(n=Count("id")):
            unhealthy.add_metric([health], count)
        yield unhealthy

        reservations = GaugeMetricFamily("gpufleet_reservations", "Reservations by state.", labels=["state"])
        by_state = dict(Reservation.objects.values_list("state").annotate(n=Count("id")))
        for state in ReservationState.values:
            reservations.add_metric([state], by_state.get(state, 0))
        yield reservations

        remediations = GaugeMetricFamily(
            "gpufleet_remediations",
            "Alerts acted on, by action and outcome, since the start.",
            labels=["action", "status"],
        )
        for action, status, count in Remediation.objects.values_list("action", "status").annotate(n=Count("id")):
            remediations.add_metric([action, status], count)
        yield remediations

        yield from reliability_metrics(remediation_reliability())


def reliability_metrics(figures: Reliability):
    """Automatic remediation's MTTR, MTBI and counts by rung and outcome over the window: gauges,
    absent when there is nothing to average (no incident ended, or none on a model)."""
    window = f"the last {figures.window.days} days"
    mean = GaugeMetricFamily(
        "gpufleet_remediation_mttr_seconds",
        "Mean time to repair: from an incident's alert firing to its node healthy again, or replaced "
        f"when it served a tenant, over the incidents of {window} that have ended.",
    )
    median = GaugeMetricFamily(
        "gpufleet_remediation_median_time_to_repair_seconds",
        f"Median of the same times to repair as gpufleet_remediation_mttr_seconds, over {window}.",
    )
    # Both or neither: they are None together, when no incident has ended.
    if figures.repair.mean is not None and figures.repair.median is not None:
        mean.add_metric([], figures.repair.mean.total_seconds())
        median.add_metric([], figures.repair.median.total_seconds())
    yield mean
    yield median

    mtbi = GaugeMetricFamily(
        "gpufleet_remediation_mtbi_seconds",
        f"Mean time between incidents per GPU model: node-time (nodes of the model times {window}) "
        "divided by the incidents on them in that time.",
        labels=["gpu_model"],
    )
    for entry in figures.mtbi_per_gpu_model:
        mtbi.add_metric([entry.gpu_model], entry.node_time_between_incidents.total_seconds())
    yield mtbi

    by_step = GaugeMetricFamily(
        "gpufleet_remediations_by_step",
        f"Remediations received in {window} (shadow rules' aside), by rung taken (none: no rung) and outcome.",
        labels=["step", "status"],
    )
    for (step, status), count in sorted(figures.by_step_and_status.items()):
        by_step.add_metric([step or "none", status], count)
    yield by_step


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(FleetCollector())


def may_scrape(request: HttpRequest) -> bool:
    token = bearer_token(request)
    return is_prometheus_token(token) if token is not None else is_operator(request.user)


class ScrapeView(View):
    """A metrics page: Prometheus's or an operator's to read."""

    http_method_names = ["get", "head", "options"]

    def dispatch(self, request, *args, **kwargs):
        if not may_scrape(request):
            return JsonResponse({"detail": REFUSED}, status=401, headers={"WWW-Authenticate": REALM})
        return super().dispatch(request, *args, **kwargs)


class FleetMetricsView(ScrapeView):
    def get(self, request):
        return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class ProcessMetricsView(ScrapeView):
    """django-prometheus's /metrics: requests, latencies and database calls of the web processes."""

    def get(self, request):
        return ExportToDjangoView(request)
