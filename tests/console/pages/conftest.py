import pytest
from django.test import Client


@pytest.fixture
def alice_client(alice, django_user_model):
    """A browser signed in as alice's user, on the tenant's page."""
    alice.user = django_user_model.objects.create_user("alice", password="alice-password-1")
    alice.save()
    client = Client()
    client.force_login(alice.user)
    return client
