"""The pages on top of the private listener's routes, until gpufleet/urls.py includes them."""

from fleet.pages.urls import public_patterns, tenant_patterns
from gpufleet.urls import handler404, handler500  # noqa: F401
from gpufleet.urls import urlpatterns as private_patterns

urlpatterns = [*private_patterns, *public_patterns, *tenant_patterns]
