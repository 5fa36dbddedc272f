"""Prometheus's credential: `Authorization: Bearer <GPUFLEET_PROMETHEUS_TOKEN>`, compared in constant
time. It opens what Prometheus reads on the private listener (the scrape targets, /metrics and
/metrics/fleet) and nothing else; no user stands behind it. A signed-in operator (staff) may read
the same, from a browser."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

if TYPE_CHECKING:
    from rest_framework.views import APIView

PROMETHEUS = "prometheus"
REALM = 'Bearer realm="prometheus"'
REFUSED = "sign in as an operator, or send Prometheus's bearer token"


def bearer_token(request: HttpRequest | Request) -> str | None:
    """The request's bearer token, or None when it sends none."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def is_prometheus_token(token: str) -> bool:
    return hmac.compare_digest(token.encode(), settings.GPUFLEET_PROMETHEUS_TOKEN.encode())


def is_operator(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    """A signed-in operator: the admin's own test (staff)."""
    return user is not None and user.is_authenticated and bool(getattr(user, "is_staff", False))


class PrometheusAuthentication(BaseAuthentication):
    """A valid token authenticates Prometheus itself (`request.auth`); a wrong one is a 401."""

    def authenticate(self, request: Request) -> tuple[None, str] | None:
        token = bearer_token(request)
        if token is None:
            return None
        if not is_prometheus_token(token):
            raise exceptions.AuthenticationFailed("a valid bearer token is required")
        return None, PROMETHEUS

    def authenticate_header(self, request: Request) -> str:
        return REALM


class IsPrometheusOrOperator(permissions.BasePermission):
    message = REFUSED

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth == PROMETHEUS or is_operator(request.user)
