"""The tenants' API as tests call it in process: a client holding an organisation's key or a
member's, JSON posts."""

import json

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from reservations import access
from reservations.models import Membership, Tenant
from reservations.services import api_keys
from tests.support.factories import tenant_token


def tenant_client(name: str) -> APIClient:
    """A client with the token of tenant `name`, created as an operator would if it is new."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant_token(name)}")
    return client


def post(client, path, body, **extra):
    """POST `body` (JSON-encoded unless it is a string already) as application/json."""
    return client.post(
        path, body if isinstance(body, str) else json.dumps(body), content_type="application/json", **extra
    )


def member_key(tenant: str, username: str, role: str, *, scope: str = "read-write") -> str:
    """A key made by `username`, a member of organisation `tenant` with `role` (both made if new)."""
    organisation, _ = Tenant.objects.get_or_create(name=tenant)
    user, _ = get_user_model().objects.get_or_create(username=username)
    Membership.objects.update_or_create(tenant=organisation, user=user, defaults={"role": role})
    issued = api_keys.issue_key(tenant=organisation, name=f"{username}'s", scope=access.Scope(scope), created_by=user)
    return issued.key


def key_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client
