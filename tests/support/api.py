"""The tenants' API as tests call it in process: a client holding a tenant's token, JSON posts."""

import json

from rest_framework.test import APIClient

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
