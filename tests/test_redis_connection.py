"""REDIS_URL through Sentinel (core/redis_connection.py): read as kombu reads it for Celery's
broker, so that the broker, the cache and /healthz all reach the same master; a URL that cannot
work stops the process at start with one line."""

import os
import re
import subprocess
import sys

import pytest
from django.test import override_settings
from kombu import Connection

from core.redis_connection import SentinelURL, sentinel_url
from tests.support import REPO_ROOT
from tests.support.ports import free_port


def test_the_contracts_form_names_each_sentinel_and_the_database():
    assert sentinel_url("sentinel://10.0.0.1:26379;sentinel://sentinel-2:26380/0") == SentinelURL(
        sentinels=(("10.0.0.1", 26379), ("sentinel-2", 26380)), db=0, username=None, password=None
    )


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26380/0",
        "sentinel://redis-sentinel.gpufleet.svc",
        "sentinel://:s%40cret@a:26379/2;sentinel://:s%40cret@b:26380/2",
        "sentinel://default:pw@a:1;sentinel://default:pw@b:2",
    ],
)
def test_a_sentinel_url_means_what_it_means_to_celery(url):
    """kombu moves from Sentinel to Sentinel when one does not answer, each time with that one's
    URL's database and credentials: each must agree with what the other clients use."""
    address = sentinel_url(url)
    assert address is not None
    on_each = [Connection(part) for part in url.split(";")]
    assert address.sentinels == tuple((c.hostname, c.port or c.transport.default_port) for c in on_each)
    for celery in on_each:
        assert (celery.userid, celery.password) == (address.username, address.password)
        assert int(celery.virtual_host.strip("/") or 0) == address.db


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:pw@redis.example:6380/1", "unix:///run/redis.sock"]
)
def test_any_other_url_is_redis_pys_own(url):
    assert sentinel_url(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://:s3cret@a:6379;sentinel://b:26379/0", "expected every URL between the ;s to be sentinel://"),
        ("sentinel://:s3cret@a:26379/3;sentinel://:s3cret@b:26379", "the Sentinels name databases [0, 3]"),
        ("sentinel://:s3cret@a:26379;sentinel://b:26379/0", "the Sentinels have different passwords"),
        ("sentinel://:s3cret@a:99999/0", "a Sentinel on a: expected its port"),
        ("sentinel://:s3cret@a:26379/zero", "the database is 'zero'"),
        ("sentinel://:s3cret@:26379/0", "expected sentinel://host:port for each Sentinel"),
    ],
)
def test_a_sentinel_url_that_cannot_work_is_refused_without_its_password(url, problem):
    with pytest.raises(ValueError, match=re.escape(problem)) as refused:
        sentinel_url(url)
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"REDIS_URL": "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379/0"},
            "gpu-fleet: REDIS_URL is a sentinel:// URL: expected GPUFLEET_REDIS_SENTINEL_MASTER, its master's name",
        ),
        (
            {
                "REDIS_URL": "sentinel://:s3cret@a:26379/1;sentinel://:s3cret@b:26379",
                "GPUFLEET_REDIS_SENTINEL_MASTER": "m",
            },
            "gpu-fleet: REDIS_URL: the Sentinels name databases [0, 1]: expected one, the same on each (none is 0)",
        ),
    ],
)
def test_a_process_with_a_sentinel_url_that_cannot_work_stops_at_start_with_one_line(env, line):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    result = subprocess.run(
        [sys.executable, "-c", "import gpufleet.settings"],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (1, line + "\n")


def test_healthz_names_the_broker_down_while_no_sentinel_answers(client, db):
    nowhere = f"sentinel://127.0.0.1:{free_port()};sentinel://127.0.0.1:{free_port()}/0"
    with override_settings(REDIS_URL=nowhere, REDIS_SENTINEL_MASTER="gpufleet"):
        answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.json()["broker"] == "down: MasterNotFoundError"
