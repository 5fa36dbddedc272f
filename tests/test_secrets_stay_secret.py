"""BMC credentials, API tokens, the webhook token and signing keys never appear in an API
answer, a page, an admin list or form, or a log line: every route and every admin model, swept."""

import logging
import re

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import URLResolver, get_resolver

from attestation.ear import generate_signing_key
from fleet.models import Node
from reservations.models import Tenant, Webhook
from tests.support.agent_credentials import tenancy_drive
from tests.support.factories import tenant_token
from workflows.agent import AgentClient, AgentUnavailable
from workflows.redfish import BMCAccess, RedfishClient, RedfishError

BMC_PASSWORD = "bmc-secret-3f9a1c"
WEBHOOK_TOKEN = "webhook-secret-77d2e0"
AGENT_TOKEN = "agent-secret-5be04d"
HOOK_SECRET = "whsec_c2VjcmV0LW9mLWNhcm9scy13ZWJob29r"


def routes(patterns=None, prefix=""):
    """Every route of the private listener but the admin's (swept model by model below)."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            if str(entry.pattern) != "admin/":
                yield from routes(entry.url_patterns, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern)


@pytest.fixture
def secrets(active_node, settings, tmp_path):
    settings.GPUFLEET_WEBHOOK_TOKEN = WEBHOOK_TOKEN
    key_file = tmp_path / "key.pem"
    generate_signing_key(key_file)
    settings.GPUFLEET_SIGNING_KEY = str(key_file)
    Node.objects.update(bmc_password=BMC_PASSWORD)
    _, given = tenancy_drive(active_node)  # what the tenant's drive gives its node's agent
    token = tenant_token("carol")
    Webhook.objects.create(
        tenant=Tenant.objects.get(name="carol"),
        url="https://hooks.example/x",
        events=["node.quarantined"],
        secret=HOOK_SECRET,
    )
    pem_body = "".join(key_file.read_text().splitlines()[1:-1])
    yield {
        "BMC password": BMC_PASSWORD,
        "agent token": given["agent_token"],
        "agent report token": given["report_token"],
        "tenant token": token,
        "webhook token": WEBHOOK_TOKEN,
        "signing key": pem_body,
        "webhook secret": HOOK_SECRET,
    }


def assert_clean(where: str, text: str, secrets: dict) -> None:
    for name, secret in secrets.items():
        assert secret not in text, f"the {name} appears in {where}"
    assert not re.search(r'"d"\s*:', text), f"a private JWK member appears in {where}"


@pytest.mark.django_db
def test_no_route_shows_a_secret_to_a_tenant_or_an_operator(secrets, admin_client, active_node, caplog):
    caplog.set_level(logging.DEBUG)
    tenant = Client(HTTP_AUTHORIZATION=f"Token {secrets['tenant token']}")
    values = {
        "name": active_node.name,
        "node": active_node.name,
        "pk": str(active_node.reservation_id),
        "key": "none",
        "token": "none",
        "delivery": "1",
        "webhook": "1",
    }
    for route in routes():
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)
        for who, client in (("a tenant", tenant), ("an operator", admin_client)):
            answer = client.get(path)
            assert answer.status_code < 500, (path, who)
            body = answer.getvalue()  # the content; a streaming answer's, joined
            assert_clean(f"GET {path} as {who}", body.decode(errors="replace"), secrets)
    assert_clean("the logs", caplog.text, secrets)


@pytest.mark.django_db
def test_no_admin_list_or_form_shows_a_secret(secrets, admin_client):
    for model in admin.site._registry:
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        pages = [base]
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append(f"{base}{first.pk}/change/")
        for page in pages:
            answer = admin_client.get(page)
            assert answer.status_code == 200, page
            assert_clean(page, answer.content.decode(errors="replace"), secrets)


@pytest.mark.django_db
def test_a_failing_bmc_call_names_the_node_and_never_its_credentials(secrets, caplog):
    caplog.set_level(logging.DEBUG)
    client = RedfishClient(
        BMCAccess("node-x", "http://127.0.0.1:9/", "1", "admin", BMC_PASSWORD), timeout=0.5, attempts=1
    )
    with pytest.raises(RedfishError) as failure:
        client.system()
    assert "node-x" in str(failure.value)
    assert_clean("a Redfish error", str(failure.value) + caplog.text, secrets)


@pytest.mark.django_db
def test_a_failing_agent_call_names_the_node_and_never_its_token(secrets, caplog):
    caplog.set_level(logging.DEBUG)
    agent = AgentClient("node-x", "http://127.0.0.1:9/agent/node-x", AGENT_TOKEN, timeout=0.5)
    with pytest.raises(AgentUnavailable) as failure:
        agent.inventory()
    assert "node-x" in str(failure.value)
    assert_clean("an agent error", str(failure.value) + caplog.text, secrets)


@pytest.mark.django_db
def test_an_operator_revokes_a_tenants_token_without_reading_it(secrets, admin_client):
    tenant = Client(HTTP_AUTHORIZATION=f"Token {secrets['tenant token']}")
    assert tenant.get("/v1/reservations").status_code == 200
    carol = Tenant.objects.get(name="carol")
    answer = admin_client.post(
        "/admin/reservations/tenant/",
        {"action": "revoke_api_tokens", ACTION_CHECKBOX_NAME: [carol.pk]},
        follow=True,
    )
    assert b"Revoked 1 API key" in answer.content
    assert tenant.get("/v1/reservations").status_code == 401
    assert tenant_token("carol") != secrets["tenant token"]  # create_tenant issues a new one
