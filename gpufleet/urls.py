"""URLs of the private listener."""

from django.contrib import admin
from django.urls import path

from gpufleet.healthz import HealthzView

urlpatterns = [
    path("healthz", HealthzView.as_view(), name="healthz"),
    path("admin/", admin.site.urls),
]
