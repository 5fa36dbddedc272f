"""The API's URLs plus one bare Django view, GET /bench/bare (a module whose name starts with _ is
no bench): served by the same gunicorn, settings and middleware as the API, so that a bench can set
the cheapest API request beside what Django itself costs there, and show the framework's share.

Used as the server's settings (DJANGO_SETTINGS_MODULE=bench._bare_view), which name this module as
the URL configuration too; the API's URLs are read when Django first resolves a request.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from gpufleet.settings import *  # noqa: F403 (the API's own settings, all of them)

ROOT_URLCONF = __name__


def bare(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"{}", content_type="application/json")


def __getattr__(name: str):
    """`urlpatterns`, read once the apps are loaded (the API's views need them)."""
    if name != "urlpatterns":
        raise AttributeError(name)
    from django.urls import path

    from gpufleet.urls import urlpatterns as api

    return [path("bench/bare", bare), *api]
