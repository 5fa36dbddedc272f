"""URLs of the private listener (:8000): the whole API, the admin, and every page.

Every tenant reaches this listener, so what a route shows depends on who asks
(console/pages/viewers.py): the fleet's pages and node reads need a signed-in operator or tenant
(an anonymous browser is sent to the login page, an anonymous API call is a 401), and a tenant
sees no other tenant's names; the Prometheus targets and metrics need Prometheus's token or an
operator (core/prometheus_auth.py); the admin needs an operator; the tenants' API its token.
Anonymous on purpose, each naming no one: /healthz; the login page; the schema and its docs;
/v1/capacity, /v1/images, a node's attestation and the signing keys, as the public listener
serves them; and three routes with a credential of their own: a config drive (its unguessable
token in the URL, for the BMC), Alertmanager's webhook and a node agent's XID reports (bearer).
"""

from django.contrib import admin
from django.urls import include, path

from console.metrics import FleetMetricsView, ProcessMetricsView
from console.pages.private_api import SignedInNodeDetailView, SignedInNodeListView, SignedInRemediationListView
from console.pages.urls import private_listener_patterns, tenant_patterns
from gpufleet.healthz import HealthzView
from gpufleet.schema import schema_patterns

urlpatterns = [
    path("healthz", HealthzView.as_view(), name="healthz"),
    path("v1/nodes", SignedInNodeListView.as_view(), name="node-list"),
    path("v1/nodes/<slug:name>", SignedInNodeDetailView.as_view(), name="node-detail"),
    path("v1/remediations", SignedInRemediationListView.as_view(), name="remediation-list"),
    path("v1/", include("fleet.api.urls")),
    path("v1/", include("attestation.api.urls")),
    path("v1/", include("reservations.api.urls")),
    path("v1/", include("remediation.api.urls")),
    path("v1/", include("workflows.api.urls")),
    *schema_patterns("gpufleet.urls"),
    path("admin/", admin.site.urls),
    path("metrics", ProcessMetricsView.as_view(), name="prometheus-django-metrics"),
    path("metrics/fleet", FleetMetricsView.as_view(), name="fleet-metrics"),
    *private_listener_patterns,
    *tenant_patterns,
]

handler404 = "core.api.json_not_found"
handler500 = "core.api.json_server_error"
