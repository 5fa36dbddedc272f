"""Alertmanager's bearer token on the webhook, a node agent's on its XID reports, and how the
OpenAPI document declares them."""

import hmac

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication

from fleet import services
from fleet.models import Node

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


class NodeAgentAuthentication(BaseAuthentication):
    """`Authorization: Bearer <the report token of the node's live credential>` on a route that
    names the node (fleet/services/credentials.py): the token its current boot's or tenancy's
    config drive gave it. It authenticates that node's agent (`request.auth` is the Node) and no
    other, for that boot or tenancy alone. A token of an earlier boot or tenancy, or another node's,
    is refused and audited; an unknown node is answered as a wrong token, so that the answer does
    not tell which nodes exist."""

    def authenticate(self, request):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        name = request.parser_context["kwargs"].get("node", "")
        try:
            node = services.authenticate_report(node_name=name, token=token.strip())
        except services.CredentialRefused:
            raise exceptions.AuthenticationFailed("a valid bearer token is required") from None
        return None, node

    def authenticate_header(self, request):
        return 'Bearer realm="node-agent"'


class IsNodeAgent(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.auth, Node)


class AlertmanagerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares the bearer scheme in /v1/schema, so generated clients and fuzzers send the token."""

    target_class = AlertmanagerAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")


class NodeAgentAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = NodeAgentAuthentication
    name = "nodeAgentBearerAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
