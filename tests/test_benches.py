"""Every bench runs, at a tiny size, and prints its table (issue 38): a change of schema or of
behaviour that breaks a bench fails here, not on the next person to run `make bench`.

Each bench runs as `make bench` runs it, a module in a process of its own (the tests import no
bench), on databases of this run's (named after its migrated template, and copied from it rather
than migrated) and its Redis. What a bench measures is not checked: at this size, and on shared
machines, its figures mean nothing; a bench that checks a target is told not to (--no-target).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection

from tests.support import REPO_ROOT
from tests.support.processes import process_env


@dataclass(frozen=True)
class Tiny:
    args: tuple[str, ...]
    prints: str  # a line of its table it always prints


TINY = {
    "attestation": Tiny(("--seconds", "0.02", "--nodes", "1", "--no-target"), "full verification, chains cached"),
    "bmcsim": Tiny(("--nodes", "16", "--seconds", "0.5", "--samples", "10"), "System GETs/s"),
    "capacity": Tiny(("--nodes", "100", "--misses", "3", "--hits", "20"), "100 nodes: hit p50 / p99 ms"),
    "dashboard": Tiny(("--sizes", "12", "--requests", "2", "--no-target"), "GET / (the fleet floor)"),
    "fabric": Tiny(("--nodes", "16", "--sizes", "1,2"), "NVUE calls"),
    "fleet_scale": Tiny(
        ("--booted-nodes", "8", "--workers", "2", "--reservations", "4", "--enrolled-nodes", "200"),
        "first inspection and attestation, all available",
    ),
    # Each round faults five nodes, two of them the tenant's, which replacements take over.
    "incident": Tiny(("--runs", "1", "--restarts", "0", "--intervals", "1s", "--nodes", "8"), "runs per cell"),
    "lifecycle": Tiny(("--nodes", "4", "--workers", "2", "--timeout", "120"), "nodes/minute (target >= 900)"),
    "placement": Tiny(
        (
            *("--in-process-nodes", "1000", "--placements", "20", "--pods", "1", "--nodes", "32"),
            *("--reservations", "20", "--clients", "2", "--workers", "1", "--pgbench-seconds", "1"),
        ),
        "double bookings",
    ),
    "placement_quality": Tiny(
        ("--arrivals", "100", "--fabric-arrivals", "100", "--place-calls", "10", "--no-target"), "all accepted"
    ),
    "reconcile": Tiny(
        ("--nodes", "40", "--reservations", "20", "--passes", "1", "--no-target"),
        "degraded reservation healed by the first pass",
    ),
}


def test_every_bench_has_a_tiny_size():
    benches = {path.stem for path in (REPO_ROOT / "bench").glob("*.py") if not path.stem.startswith("_")}
    assert benches == set(TINY)


@pytest.fixture
def bench_env(django_db_setup, tmp_path) -> dict[str, str]:
    """This test's processes' environment, each bench's database named after this run's migrated
    template and copied from it. This process's database is the template's copy, named after it
    and this process (tests/support/test_database.py)."""
    template = connection.settings_dict["NAME"].removesuffix(f"_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    return {
        **process_env(tmp_path),
        "REDIS_URL": settings.REDIS_URL,
        "GPUFLEET_BENCH_DATABASE": f"{template}_bench",
        "GPUFLEET_BENCH_TEMPLATE": template,
        "TMPDIR": str(tmp_path),  # the scratch folders benches keep for a look afterwards go with the test's
    }


@pytest.mark.scale
@pytest.mark.parametrize("bench", sorted(TINY))
def test_bench_runs_at_a_tiny_size(bench, bench_env):
    tiny = TINY[bench]
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}", *tiny.args],
        cwd=REPO_ROOT,
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"bench.{bench} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert tiny.prints in done.stdout, done.stdout
