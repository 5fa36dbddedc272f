"""schemathesis against the private listener, sending each operation the credential its
OpenAPI document declares (a tenant's token, Alertmanager's bearer token, a node agent's): whatever
it sends, no 5xx."""

import pytest

from fleet.models import Node
from tests.support.agent_credentials import report_token
from tests.support.factories import enrol_default_fleet, make_available, tenant_token
from tests.support.processes import run_schemathesis

pytestmark = pytest.mark.fuzzing

WEBHOOK_TOKEN = "fuzz-webhook-token"
PROMETHEUS_TOKEN = "fuzz-prometheus-token"


@pytest.mark.django_db(transaction=True)
def test_schemathesis_with_every_declared_credential_finds_no_server_error_on_the_private_api(tmp_path):
    make_available(enrol_default_fleet(12))
    # schemathesis reads its configuration from the directory it runs in (run_schemathesis: tmp_path).
    # A node agent's token speaks for its own node only: the agents' route is fuzzed as node-001,
    # with the report token of a service boot's credentials.
    (tmp_path / "schemathesis.toml").write_text(
        f'[auth.openapi.apiKeyAuth]\nbearer = "{tenant_token("fuzzer")}"\n'
        f'[auth.openapi.bearerAuth]\nbearer = "{WEBHOOK_TOKEN}"\n'
        f'[auth.openapi.prometheusBearerAuth]\nbearer = "{PROMETHEUS_TOKEN}"\n'
        f'[auth.openapi.nodeAgentBearerAuth]\nbearer = "{report_token(Node.objects.get(name="node-001"))}"\n'
        '[[operations]]\ninclude-path = "/v1/agents/{node}/xids"\nparameters = { "path.node" = "node-001" }\n'
    )
    result = run_schemathesis(
        "gpufleet.wsgi",
        tmp_path,
        "--max-examples",
        "25",
        GPUFLEET_WEBHOOK_TOKEN=WEBHOOK_TOKEN,
        GPUFLEET_PROMETHEUS_TOKEN=PROMETHEUS_TOKEN,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    # Every operation was reached with its credential, the webhook's included, not only refused.
    assert "Authentication failed" not in result.stdout, result.stdout[-3000:]
