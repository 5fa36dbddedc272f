"""Tenants' API clients: acme and globex, each with its own token."""

import pytest

from tests.support.api import tenant_client


@pytest.fixture
def acme(db):
    return tenant_client("acme")


@pytest.fixture
def globex(db):
    return tenant_client("globex")
