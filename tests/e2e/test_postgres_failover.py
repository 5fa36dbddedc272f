"""PostgreSQL fails over under a running control plane (issue #36): its primary is killed (SIGKILL),
its synchronous standby promoted, and the old primary rebuilt as the new standby, as
CloudNativePG does. The control plane is given both servers in one URL
(target_session_attrs=read-write) and follows the primary on its own: while there is none the API
answers 503 with Retry-After at once, never a 500, and writes nothing; within 15 s of the kill it
serves again, with every reservation it acknowledged (the standby had each commit before the
client heard of it); a worker whose database went away mid-step takes the node's workflow up
again, under the lease it held, and the reservation goes active.

bmcsim's 2 nodes, in one rack of one pod; one worker and beat."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests
from django.db import connection

from tests.support import REPO_ROOT
from tests.support.postgres_cluster import PostgresCluster
from tests.support.processes import wait_for
from tests.support.stack import ControlPlane

TWO_NODES = {"nodes": 2, "pods": 1, "nodes_per_rack": 2, "racks_per_leaf": 1}
DATABASE = "gpufleet_failover"
RECOVERY_SECONDS = 15
# In one process: migrate (which finds the schema of the copy, below, up to date), the fleet enrolled
# from bmcsim, attestation configured, and an organisation, whose key is printed on the last line.
SET_UP = """
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
call_command("seed_fleet", "--bmcsim-url", "{bmcsim}")
call_command("import_trust_anchors", "{bmcsim}/bmcsim/v1/roots")
call_command("import_reference_values", "{bmcsim}/bmcsim/v1/reference-values")
call_command("import_gpu_rims", "{bmcsim}/bmcsim/v1/gpu-rims")
call_command("create_tenant", "acme")
"""


@pytest.fixture
def cluster(django_db_setup):
    """A primary and its synchronous standby holding a copy of this test run's migrated database."""
    own = connection.settings_dict
    servers = PostgresCluster()
    try:
        servers.create_database(
            DATABASE, copy_of=f"postgresql://{own['USER']}@{own['HOST']}:{own['PORT']}/{own['NAME']}"
        )
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def plane(tmp_path, bmcsim, private_redis, control_plane_port, cluster, request):
    """The control plane on both servers. Its lease outlasts the failover, so the worker that held
    a node when the primary died holds it still once a primary answers."""
    control_plane = ControlPlane(
        tmp_path,
        bmcsim.url,
        private_redis,
        web_port=control_plane_port,
        DATABASE_URL=cluster.url(DATABASE),
        GPUFLEET_LEASE_SECONDS="15",
        GPUFLEET_FABRIC_SYNC_SECONDS="1",
    )
    yield control_plane
    control_plane.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print(control_plane.logs())


def set_up(plane: ControlPlane, bmcsim) -> str:
    """The control plane's database ready through the multi-host URL; the organisation's key."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SET_UP.format(bmcsim=bmcsim.url)],
        cwd=REPO_ROOT,
        env=plane.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def first_value(cluster: PostgresCluster, sql: str):
    rows = cluster.primary.execute(sql, DATABASE)
    return rows[0][0] if rows else None


@pytest.mark.parametrize("bmcsim", [TWO_NODES], indirect=True)
def test_the_control_plane_follows_its_primary_to_the_promoted_standby(bmcsim, cluster, plane):
    key = set_up(plane, bmcsim)
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {key}"
    web = plane.start_web()
    plane.start_worker("w1")
    plane.start_beat()
    available = "SELECT count(*) FROM fleet_node WHERE state = 'available'"
    wait_for("both nodes available", lambda: first_value(cluster, available) == TWO_NODES["nodes"], 60)

    # Whichever node is picked waits for its agent, mid-step, when the primary dies.
    for (name,) in cluster.primary.execute("SELECT name FROM fleet_node", DATABASE):
        assert bmcsim.post("/bmcsim/v1/faults", json={"node": name, "kind": "agent_down"}).ok
    created = api.post(f"{web}/v1/reservations", json={"node_count": 1}, timeout=10)
    assert created.status_code == 201, created.text
    reservation = created.json()["id"]
    node = first_value(cluster, f"SELECT id FROM fleet_node WHERE reservation_id = {reservation}")
    step = f"SELECT step FROM fleet_node WHERE id = {node}"
    wait_for("the worker waiting for the node's agent", lambda: first_value(cluster, step) == "wait_for_agent", 30)

    killed_at = time.monotonic()
    cluster.kill_primary()
    for ask in (
        lambda: api.get(f"{web}/v1/reservations/{reservation}", timeout=10),
        lambda: api.post(f"{web}/v1/reservations", json={"node_count": 1}, timeout=10),
    ):
        began = time.monotonic()
        answer = ask()
        assert answer.status_code == 503, answer.text
        assert answer.json() == {"detail": "the database is unavailable: try again shortly"}
        assert int(answer.headers["Retry-After"]) > 0
        assert time.monotonic() - began < 2, "answered at once"
    assert bmcsim.delete("/bmcsim/v1/faults").ok  # the agents answer from now on

    cluster.promote_standby()
    cluster.rebuild_standby()  # until then, commits wait for a standby

    def served() -> bool:
        return api.get(f"{web}/v1/reservations/{reservation}", timeout=10).status_code == 200

    wait_for("the API to serve again", served, timeout=RECOVERY_SECONDS - (time.monotonic() - killed_at))
    mine = api.get(f"{web}/v1/reservations", timeout=10).json()["results"]
    assert [r["id"] for r in mine] == [reservation], "the acknowledged reservation, and not the refused one"

    def active() -> bool:
        return api.get(f"{web}/v1/reservations/{reservation}", timeout=10).json()["state"] == "active"

    wait_for("the reservation active", active, timeout=60)
    # The worker that lost its database at wait_for_agent started the workflow over under the lease
    # it held, as soon as a primary answered: no wait for the lease to run out, no other claim.
    steps = cluster.primary.execute(
        "SELECT reason, detail->>'token' FROM fleet_auditevent"
        f" WHERE node_id = {node} AND event = 'step_changed' AND from_state = 'provisioning' ORDER BY id",
        DATABASE,
    )
    starts = [token for name, token in steps if name == "stop_idle_diagnostics"]
    assert len(starts) == 2 and starts[0] == starts[1], steps
