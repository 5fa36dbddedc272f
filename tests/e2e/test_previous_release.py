"""The previous release's web, worker and beat on this release's schema, as they run during a
deployment: the migrations are applied first and the old processes keep serving until they are
replaced (the rule that lets them is tests/test_migrations_expand_only.py).

The previous release is the commit before the one that added the newest migration (or this
commit, while a new migration is not yet committed). Its tree is exported from git into a folder
of the test's own, and its processes run from there in this checkout's virtual environment,
importing nothing of this checkout: on the test database, which this checkout's migrations made.
The tenant is made with its `manage.py create_tenant`, the reservation goes through its API, its
worker provisions the node and, once released, wipes, inspects and attests it back to available.
Nothing answers 5xx, and no log tells of a column or table the old code missed.

It needs the repository's history: where there is none (an export, a shallow clone) it fails,
saying so; a clone has it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO, StringIO
from pathlib import Path

import pytest
import requests
from django.core.management import call_command

from fleet.models import Node
from reservations.models import Reservation
from tests.support import REPO_ROOT
from tests.support.factories import make_available_as_inspected
from tests.support.processes import Process, answers, once_ready, tool, wait_for
from tests.support.stack import ControlPlane

MIGRATIONS = "*/migrations/0*.py"
# What PostgreSQL and Django say when old code meets a schema it cannot use.
SCHEMA_ERRORS = re.compile(
    r"UndefinedColumn|UndefinedTable|NotNullViolation|violates not-null constraint|"
    r"(?:column|relation) \S+ does not exist|Internal Server Error"
)


def git(*args: str) -> str:
    answer = subprocess.run([tool("git"), *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if answer.returncode != 0:
        raise AssertionError(
            f"git {' '.join(args)} failed: {answer.stderr.strip()}\nThis test runs the previous release from the "
            "repository's history: run it in a clone of the repository (not an export, not a shallow clone)."
        )
    return answer.stdout.strip()


def previous_release() -> str:
    """The commit before the one that added the newest migration; this one while a new migration
    is not committed yet."""
    uncommitted = git("status", "--porcelain", "--untracked-files=all", "--", MIGRATIONS).splitlines()
    if any(line.startswith(("??", "A")) for line in uncommitted):
        return git("rev-parse", "HEAD")
    newest = git("log", "-1", "--diff-filter=A", "--format=%H", "--", MIGRATIONS)
    if not newest:
        raise AssertionError("git log finds no commit that added a migration: the history is missing or cut short")
    return git("rev-parse", "--verify", f"{newest}^")


@pytest.fixture
def previous_tree(tmp_path):
    """Where the previous release's files go, removed after its processes (the control plane's)
    have stopped."""
    tree = tmp_path / "previous-release"
    yield tree
    shutil.rmtree(tree, ignore_errors=True)


def export(commit: str, tree: Path) -> None:
    archive = subprocess.run([tool("git"), "archive", commit], cwd=REPO_ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")


def running_from(tree: Path) -> dict[str, str]:
    """The environment that makes Celery and manage.py import the code in `tree` alone, its client
    package included, and nothing of this checkout (whose folder Celery is started in)."""
    return {
        "PYTHONSAFEPATH": "1",  # the current directory is not put on sys.path
        "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "client")]),
        "CELERY_WORKDIR": str(tree),
    }


def start_web(tree: Path, plane: ControlPlane) -> str:
    """The previous release's gunicorn, the private listener on the plane's web port, once it
    answers. Started in `tree`: gunicorn puts the folder it starts in first on sys.path."""
    url = f"http://127.0.0.1:{plane.web_port}"
    options = ["--bind", url.removeprefix("http://"), "--workers", "2", "--log-level", "warning"]
    process = Process(
        "web",
        ["env", "-C", str(tree), sys.executable, "-m", "gunicorn", "gpufleet.wsgi", *options],
        plane.env,
        plane.tmp_path,
    )
    plane.workers["web"] = once_ready(process, "the previous release's web", lambda: answers(f"{url}/healthz"), 30)
    return url


def manage(tree: Path, env: dict[str, str], *args: str) -> str:
    """The previous release's manage.py; what it printed."""
    answer = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=60
    )
    assert answer.returncode == 0, answer.stderr
    return answer.stdout


def test_the_previous_release_runs_on_this_release_s_schema(previous_tree, bmcsim, control_plane):
    export(previous_release(), previous_tree)
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    make_available_as_inspected(list(Node.objects.all()))
    control_plane.configure_attestation()  # for the inspection after the wipe
    control_plane.env.update(running_from(previous_tree))
    web = start_web(previous_tree, control_plane)
    worker = control_plane.start_worker("w1")
    beat = control_plane.start_beat()
    wait_for("the worker and beat ready", lambda: all(" ready." in p.output() for p in (worker, beat)), 60)

    key = manage(previous_tree, control_plane.env, "create_tenant", "acme").splitlines()[-1]
    tenant = requests.Session()
    tenant.headers["Authorization"] = f"Token {key}"
    created = tenant.post(f"{web}/v1/reservations", json={"node_count": 1}, timeout=10)
    assert created.status_code == 201, created.text
    path = f"{web}/v1/reservations/{created.json()['id']}"
    wait_for("the reservation active", lambda: tenant.get(path, timeout=10).json()["state"] == "active", 60, 0.2)
    (machine,) = tenant.get(path, timeout=10).json()["machines"]
    node = Node.objects.get(name=machine["name"])
    assert (node.state, node.reservation_id) == ("active", created.json()["id"])

    released = tenant.post(f"{path}/release", json={}, timeout=10)
    assert released.status_code == 200, released.text
    wait_for("the node wiped, inspected and attested", lambda: state(node) == "available", 90, 0.2)
    assert Reservation.objects.get(pk=created.json()["id"]).state == "released"
    listed = tenant.get(f"{web}/v1/reservations", timeout=10)
    assert listed.status_code == 200, listed.text
    assert [r["state"] for r in listed.json()["results"]] == ["released"]

    for process in (control_plane.workers["web"], worker, beat):
        assert [line for line in process.output().splitlines() if SCHEMA_ERRORS.search(line)] == [], process.name


def state(node: Node) -> str:
    node.refresh_from_db()
    return node.state
