"""Whole-system fixtures: bmcsim, Redis, Celery workers and beat as real processes, against the
test database (transactional tests, so every process sees what the others commit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from tests.support.bmcsim import start_bmcsim
from tests.support.ports import free_port
from tests.support.processes import RedisServer
from tests.support.stack import ControlPlane

E2E_NODES = 24


def pytest_collection_modifyitems(items):
    """Every test here is end-to-end: `make check` leaves them to `make test`."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def control_plane_port() -> int:
    """Where the control plane's web server will listen: bmcsim's agents report XIDs there."""
    return free_port()


@pytest.fixture
def bmcsim(tmp_path, control_plane_port, request):
    """E2E_NODES nodes; a test may ask for another fleet shape, a bmcsim topology file's object, with
    `@pytest.mark.parametrize("bmcsim", [{...}], indirect=True)`."""
    args: tuple[str, ...] = ()
    if shape := getattr(request, "param", None):
        topology = tmp_path / "topology.json"
        topology.write_text(json.dumps(shape))
        args = ("--topology", str(topology))
    sim = start_bmcsim(
        tmp_path / "bmcsim", nodes=E2E_NODES, args=args, control_plane_url=f"http://127.0.0.1:{control_plane_port}"
    )
    yield sim
    sim.stop()


@pytest.fixture
def private_redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def control_plane(transactional_db, tmp_path, bmcsim, private_redis, control_plane_port, request):
    """Two workers and beat, not started until the test calls `start()`; stopped before the database is flushed."""
    overrides = getattr(request, "param", {})
    plane = ControlPlane(tmp_path, bmcsim.url, private_redis, web_port=control_plane_port, **overrides)
    # This process reads results and serves the JWKS with the workers' signing keys, and where it
    # attests, asks bmcsim's OCSP responder as they do.
    with override_settings(
        GPUFLEET_SIGNING_KEY=str(plane.signing_keys), GPUFLEET_OCSP_RESPONDER=plane.env["GPUFLEET_OCSP_RESPONDER"]
    ):
        yield plane
    plane.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print(plane.logs())
    # What this process enqueued on commit went to the tests' own broker, which no worker reads.
    redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.report_call = report
    return report
