"""GET /healthz: 200 when PostgreSQL and Redis answer, 503 naming what is down."""

import json
import os
import subprocess
import sys

from django.test import override_settings

from tests.support import REPO_ROOT


def test_healthy(client, db):
    answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "database": "ok", "broker": "ok"}


@override_settings(REDIS_URL="redis://127.0.0.1:9/0")
def test_broker_down_is_named(client, db):
    answer = client.get("/healthz")
    assert answer.status_code == 503
    body = answer.json()
    assert body["database"] == "ok" and body["broker"].startswith("down")
    assert body["detail"] == "broker down"


def test_database_down_is_named():
    # A separate process whose DATABASE_URL points at a port where nothing listens.
    code = (
        "import django, json; django.setup();"
        "from django.test.utils import setup_test_environment; setup_test_environment();"
        "from django.test import Client; r = Client().get('/healthz');"
        "print(json.dumps({'status': r.status_code, 'body': r.json()}))"
    )
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://postgres@127.0.0.1:9/gpufleet",
        "DJANGO_SETTINGS_MODULE": "gpufleet.settings",
    }
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503
    assert answer["body"]["database"].startswith("down") and answer["body"]["broker"] == "ok"
    assert answer["body"]["detail"] == "database down"


def test_only_reads_are_allowed(client, db):
    answer = client.post("/healthz")
    assert answer.status_code == 405
    assert "detail" in answer.json()
