"""Alertmanager's bearer token on the webhook, and how the OpenAPI document declares it."""

import hmac

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication

ALERTMANAGER = "alertmanager"


class AlertmanagerAuthentication(BaseAuthentication):
    """`Authorization: Bearer <GPUFLEET_WEBHOOK_TOKEN>`, compared in constant time. No user
    stands behind it: a valid token authenticates Alertmanager itself (`request.auth`)."""

    def authenticate(self, request):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        if not hmac.compare_digest(token.strip().encode(), settings.GPUFLEET_WEBHOOK_TOKEN.encode()):
            raise exceptions.AuthenticationFailed("a valid bearer token is required")
        return None, ALERTMANAGER

    def authenticate_header(self, request):
        return 'Bearer realm="alertmanager"'


class IsAlertmanager(permissions.BasePermission):
    def has_permission(self, request, view):
        return request.auth == ALERTMANAGER


class AlertmanagerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares the bearer scheme in /v1/schema, so generated clients and fuzzers send the token."""

    target_class = AlertmanagerAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
