"""The OpenAPI document of a listener, with browsable docs served from local static files."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView


def schema_patterns(urlconf: str) -> list:
    """GET /v1/schema (OpenAPI 3 of exactly the routes of `urlconf`), /v1/docs (Swagger UI), /v1/redoc."""
    return [
        path("v1/schema", SpectacularAPIView.as_view(urlconf=urlconf), name="schema"),
        path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
        path("v1/redoc", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    ]
