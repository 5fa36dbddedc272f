"""schemathesis against the private listener with a tenant's token: whatever it sends, no 5xx."""

import pytest

from tests.support.factories import enrol_default_fleet, make_available, tenant_token
from tests.support.processes import run_schemathesis


@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_server_error_on_the_private_api(tmp_path):
    make_available(enrol_default_fleet(12))
    token = tenant_token("fuzzer")
    result = run_schemathesis(
        "gpufleet.wsgi",
        tmp_path,
        "--header",
        f"Authorization: Token {token}",
        "--max-examples",
        "25",
        GPUFLEET_WEBHOOK_TOKEN="fuzz-webhook-token",
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
