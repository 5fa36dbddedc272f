"""URLs of the public listener (:8001): reads that hold no tenant's private data, and nothing else.

Read-only by construction: every route here is to a view that has no write method at all, not
to one that refuses writes (tests/test_public_listener.py walks every pattern to prove it).
Naming no one: no page or answer here names a tenant, an operator, a worker or a reservation;
the pages and the node reads go through console/pages/disclosure.py
(tests/test_public_names_no_one.py sweeps every route to prove it).
"""

from django.urls import path

from attestation.api.views import NodeAttestationView, SigningKeysView
from console.pages.public_api import PublicNodeDetailView, PublicNodeListView
from console.pages.urls import public_listener_patterns
from gpufleet.healthz import HealthzView
from gpufleet.schema import schema_patterns
from remediation.api.views import RemediationListView
from reservations.api.views import CapacityView

urlpatterns = [
    # Its database alone: the public listener holds no broker URL (gpufleet/settings_public.py).
    path("healthz", HealthzView.as_view(checks=("database",)), name="healthz"),
    path("v1/capacity", CapacityView.as_view(), name="capacity"),
    path("v1/nodes", PublicNodeListView.as_view(), name="node-list"),
    path("v1/nodes/<slug:name>", PublicNodeDetailView.as_view(), name="node-detail"),
    path("v1/nodes/<slug:name>/attestation", NodeAttestationView.as_view(), name="node-attestation"),
    path("v1/attestation/keys", SigningKeysView.as_view(), name="attestation-keys"),
    path("v1/remediations", RemediationListView.as_view(), name="remediation-list"),
    *schema_patterns("gpufleet.urls_public"),
    *public_listener_patterns,
]

handler404 = "core.api.json_not_found"
handler500 = "core.api.json_server_error"
