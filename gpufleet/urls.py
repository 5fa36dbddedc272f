"""URLs of the private listener (:8000): the whole API, the admin, and every page."""

from django.contrib import admin
from django.urls import include, path

from console.metrics import FleetMetricsView
from console.pages.urls import public_patterns, tenant_patterns
from gpufleet.healthz import HealthzView
from gpufleet.schema import schema_patterns

urlpatterns = [
    path("healthz", HealthzView.as_view(), name="healthz"),
    path("v1/", include("fleet.api.urls")),
    path("v1/", include("attestation.api.urls")),
    path("v1/", include("reservations.api.urls")),
    path("v1/", include("remediation.api.urls")),
    path("v1/", include("workflows.api.urls")),
    *schema_patterns("gpufleet.urls"),
    path("admin/", admin.site.urls),
    path("metrics/fleet", FleetMetricsView.as_view(), name="fleet-metrics"),
    path("", include("django_prometheus.urls")),
    *public_patterns,
    *tenant_patterns,
]

handler404 = "core.api.json_not_found"
handler500 = "core.api.json_server_error"
