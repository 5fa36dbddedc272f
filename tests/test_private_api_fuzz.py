"""schemathesis against the private listener with a tenant's token: whatever it sends, no 5xx."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from attestation.ear import generate_signing_key
from tests.conftest import enrol_default_fleet, make_available
from tests.e2e.conftest import Process, _answers, free_port, wait_for


@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_server_error_on_the_private_api(tmp_path):
    make_available(enrol_default_fleet(12))
    out = StringIO()
    call_command("create_tenant", "fuzzer", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    (tmp_path / "keys").mkdir()
    generate_signing_key(tmp_path / "keys" / "key.pem")
    db = connection.settings_dict
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "GPUFLEET_SIGNING_KEY": str(tmp_path / "keys"),
        "GPUFLEET_WEBHOOK_TOKEN": "fuzz-webhook-token",
    }
    server = Process(
        "web",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "gpufleet.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--log-level",
            "warning",
        ],
        env,
        tmp_path,
    )
    try:
        wait_for("the private listener", lambda: _answers(f"http://127.0.0.1:{port}/healthz"), timeout=30)
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                f"http://127.0.0.1:{port}/v1/schema",
                "--header",
                f"Authorization: Token {token}",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "25",
                "--generation-deterministic",
                "--request-timeout",
                "20",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
