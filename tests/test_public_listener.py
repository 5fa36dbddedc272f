"""The public listener is read-only by construction, and its OpenAPI document holds up to schemathesis."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import URLPattern

from tests.support.factories import enrol_default_fleet
from tests.support.processes import run_schemathesis
from tests.support.urls import patterns

PUBLIC = "gpufleet.urls_public"
READS = {"get", "head", "options"}


def allowed_methods(pattern: URLPattern) -> set[str]:
    view = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
    assert view is not None, f"{pattern} is not a class-based view: its methods cannot be checked"
    return {method for method in view.http_method_names if hasattr(view, method)} | {"head"}


def concrete(route: str) -> str:
    return "/" + route.replace("<slug:name>", "node-001")


def test_every_public_route_leads_to_a_view_with_only_read_methods():
    routes = list(patterns(PUBLIC))
    assert len(routes) >= 8
    for route, pattern in routes:
        assert allowed_methods(pattern) <= READS, f"{route} allows {allowed_methods(pattern) - READS}"


@override_settings(ROOT_URLCONF=PUBLIC)
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_every_write_to_every_public_path_is_405_or_404(client, fleet, method):
    for route, _ in patterns(PUBLIC):
        answer = getattr(client, method)(concrete(route), "{}", content_type="application/json")
        assert answer.status_code in (404, 405), f"{method.upper()} {route}: {answer.status_code}"


@override_settings(ROOT_URLCONF=PUBLIC)
def test_nothing_private_is_routed(client, db):
    for path in ["/admin/", "/v1/reservations", "/v1/alerts/alertmanager", "/v1/prometheus/targets", "/metrics"]:
        assert client.get(path).status_code == 404, path
        assert client.post(path, "{}", content_type="application/json").status_code == 404, path


@override_settings(ROOT_URLCONF=PUBLIC)
def test_the_public_reads_answer(client, fleet):
    for path in [
        "/healthz",
        "/v1/capacity",
        "/v1/nodes",
        "/v1/nodes/node-001",
        "/v1/attestation/keys",
        "/v1/remediations",
        "/v1/schema",
    ]:
        assert client.get(path).status_code == 200, path


@override_settings(ROOT_URLCONF=PUBLIC)
def test_the_schema_documents_only_public_routes_and_the_docs_need_no_internet(client, db):
    schema = client.get("/v1/schema", HTTP_ACCEPT="application/json").json()
    assert set(schema["paths"]) == {
        "/healthz",
        "/v1/capacity",
        "/v1/nodes",
        "/v1/nodes/{name}",
        "/v1/nodes/{name}/attestation",
        "/v1/attestation/keys",
        "/v1/remediations",
    }
    docs = client.get("/v1/docs").content.decode()
    assert "swagger-ui" in docs and "https://" not in docs
    script = next(part.split('"')[0] for part in docs.split('src="')[1:] if "swagger-ui-bundle" in part)
    assert client.get(script).status_code == 200  # served from local static files


@override_settings(ROOT_URLCONF="gpufleet.urls")
def test_the_private_schema_documents_the_tenants_api(client, db):
    paths = client.get("/v1/schema", HTTP_ACCEPT="application/json").json()["paths"]
    assert {"/v1/reservations", "/v1/reservations/{id}/release", "/v1/alerts/alertmanager"} <= set(paths)


@override_settings(ROOT_URLCONF="gpufleet.urls")
def test_the_private_schema_declares_the_webhooks_bearer_scheme(client, db):
    schema = client.get("/v1/schema", HTTP_ACCEPT="application/json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    webhook = schema["paths"]["/v1/alerts/alertmanager"]["post"]
    assert webhook["security"] == [{"bearerAuth": []}]
    assert webhook["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AlertmanagerPayload"
    }
    assert schema["paths"]["/v1/reservations"]["post"]["security"] == [{"apiKeyAuth": []}]
    assert schema["components"]["securitySchemes"]["apiKeyAuth"]["scheme"] == "bearer"


@pytest.mark.django_db(transaction=True)
@pytest.mark.fuzzing
def test_schemathesis_finds_no_server_error_on_the_public_listener(tmp_path):
    enrol_default_fleet(12)
    # As the public listener runs: on its own read-only role, with the JWKS exported for it.
    db = connection.settings_dict
    role = f"{db['NAME']}_public"
    call_command("grant_public_role", role=role)
    call_command("export_signing_keys", str(tmp_path / "jwks.json"))
    result = run_schemathesis(
        "gpufleet.wsgi_public",
        tmp_path,
        "--max-examples",
        "30",
        PUBLIC_DATABASE_URL=f"postgresql://{role}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        GPUFLEET_PUBLIC_JWKS_FILE=str(tmp_path / "jwks.json"),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
