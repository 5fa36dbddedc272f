"""Redis through Sentinel: the master is lost mid-run, the Sentinels promote its replica within
seconds, and the control plane's processes go on with it without a restart (Celery's broker in
a worker and in a long-lived sender, the API's throttle counts in Django's cache, /healthz). The
API answers throughout: while no master answers the throttles let requests through."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests

from core.redis_connection import redis_client
from tests.support import REPO_ROOT
from tests.support.factories import tenant_token
from tests.support.ports import free_port
from tests.support.processes import process_env, start_gunicorn, start_worker, wait_for
from tests.support.redis_sentinel import MASTER_NAME, SentinelCluster
from workflows import triggers

RECOVERY_SECONDS = 10  # the soak's target, from the master's death to a task run on the new one
READ_RATE = 3  # a tenant's reads a day: the fourth is 429 where the count is kept
# As the reconciler sends a node's workflow (workflows.tasks.enqueue_workflows), from one process
# that outlives the failover, as web and beat do: a node id on each line in, what was sent out.
SENDER = (
    "import sys, django\n"
    "django.setup()\n"
    "from workflows.tasks import enqueue_workflows\n"
    "for line in sys.stdin:\n"
    "    print(enqueue_workflows([int(line)]), flush=True)\n"
)


@pytest.fixture
def sentinels(tmp_path):
    cluster = SentinelCluster(tmp_path)
    yield cluster
    cluster.stop()


@pytest.fixture
def plane(transactional_db, tmp_path, sentinels, request):
    """A web server, a worker and a sender on the Sentinels' URL; stopped before the database is flushed."""
    env = {**process_env(tmp_path), **sentinels.env(), "GPUFLEET_API_READ_RATE": f"{READ_RATE}/day"}
    web, url = start_gunicorn("web", "gpufleet.wsgi", env, tmp_path, processes=1)
    worker = start_worker("worker", env, tmp_path)
    sender = subprocess.Popen(
        [sys.executable, "-c", SENDER], cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    yield url, sender
    sender.kill()
    sender.wait(timeout=10)
    worker.stop()
    web.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print(worker.output()[-5000:], web.output()[-5000:])


def send_workflow(sender: subprocess.Popen, node_id: int) -> None:
    """Send a workflow message for `node_id` (none exists: its run is "not claimed") and its
    waiting mark; a worker that takes the message removes the mark first."""
    assert sender.stdin is not None and sender.stdout is not None
    sender.stdin.write(f"{node_id}\n")
    sender.stdin.flush()
    assert sender.stdout.readline() == "1\n", "the sender failed: its traceback is above"


def run_by_a_worker(sentinels: SentinelCluster, node_id: int) -> bool:
    return not sentinels.client().exists(f"{triggers.PREFIX}{node_id}")


def reads(url: str, token: str, count: int) -> list[int]:
    return [
        requests.get(f"{url}/v1/reservations", headers={"Authorization": f"Token {token}"}, timeout=10).status_code
        for _ in range(count)
    ]


def test_a_lost_redis_master_is_replaced_within_seconds_and_the_api_never_fails(plane, sentinels):
    url, sender = plane
    acme, globex, initech = (tenant_token(name) for name in ("acme", "globex", "initech"))
    send_workflow(sender, 1_000_001)
    wait_for("the worker to take the first message", lambda: run_by_a_worker(sentinels, 1_000_001), timeout=20)
    assert reads(url, acme, READ_RATE + 1) == [200] * READ_RATE + [429]

    old = sentinels.kill_master()
    killed = time.monotonic()
    during = []
    while (health := requests.get(f"{url}/healthz", timeout=10)).status_code != 200:
        assert time.monotonic() - killed < RECOVERY_SECONDS, f"/healthz still says {health.json()}"
        during += reads(url, globex, 1)
    assert health.json()["broker"] == "ok"
    assert set(during) <= {200, 429}, during  # never a 500: uncounted until the new master answers
    assert sentinels.wait_for_new_master(old, timeout=1) != old

    send_workflow(sender, 1_000_002)
    wait_for(
        "the worker to take a message through the new master",
        lambda: run_by_a_worker(sentinels, 1_000_002),
        timeout=max(1.0, RECOVERY_SECONDS - (time.monotonic() - killed)),
    )
    assert reads(url, initech, READ_RATE + 1) == [200] * READ_RATE + [429]

    sentinels.restart_as_replica(old)  # as the soak brings a lost master back
    assert sentinels.master() != old


def test_a_sentinel_that_does_not_answer_is_passed_over_at_once(sentinels, settings):
    """As when the master's machine is lost with the Sentinel beside it: every new connection asks
    the Sentinels where the master is, and must not wait on the dead one first."""
    settings.REDIS_SENTINEL_MASTER = MASTER_NAME
    started = time.monotonic()
    client = redis_client(f"sentinel://127.0.0.1:{free_port()};{sentinels.url}", socket_connect_timeout=0.5)
    try:
        assert client.ping()
    finally:
        client.close()
    assert time.monotonic() - started < 0.5
