"""The tenants' API authentication: an organisation's API key, sent as `Authorization: Bearer gf_...`
(or `Token gf_...`, as clients from before organisations send their tokens)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from core import acting
from reservations.services import api_keys

KEYWORDS = ("bearer", "token")


class ApiKeyAuthentication(BaseAuthentication):
    """request.user is the key's user and request.auth its api_keys.Caller (organisation, role, key)."""

    def authenticate(self, request: Request):
        words = get_authorization_header(request).split()
        if not words or words[0].lower().decode("latin-1") not in KEYWORDS:
            return None
        if len(words) != 2:
            raise exceptions.AuthenticationFailed("Authorization: one key after Bearer, and nothing else")
        try:
            presented = words[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("invalid key") from None
        try:
            caller = api_keys.accept_key(presented)
        except api_keys.KeyNotAccepted as refused:
            raise exceptions.AuthenticationFailed(refused.reason) from None
        # The audit names the person behind a member's key; an organisation key names no one but itself.
        acting.name(
            user="" if caller.api_key.organisation_key else caller.user.get_username(), key=caller.api_key.prefix
        )
        return caller.user, caller

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gpu-fleet"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares the organisations' keys in /v1/schema, so generated clients and fuzzers send one."""

    target_class = ApiKeyAuthentication
    name = "apiKeyAuth"

    def get_security_definition(self, auto_schema):
        scheme = build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
        return {**scheme, "bearerFormat": "gf_<id>_<secret>, an organisation's API key"}
