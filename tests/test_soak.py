"""`make soak` for a minute: churn by tenants calling with several members' keys and scopes, faults
(a returned node struck again among them, and every fault of the fabrics) and every kind of kill,
then no violation and no lost reservation."""

import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.soak


def test_a_minute_of_soak_ends_with_no_violation_and_no_lost_reservation():
    # Named after this run's test database (tests/settings.py), so two runs on one machine never share it.
    database = f"{os.environ.get('GPUFLEET_TEST_DATABASE', 'test_gpufleet')}_soak"
    soak = subprocess.run(
        [sys.executable, "-m", "tests.soak", "--duration", "60", "--settle-timeout", "240"],
        cwd=REPO_ROOT,
        env={**os.environ, "GPUFLEET_SOAK_DATABASE": database},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert soak.returncode == 0, soak.stdout + soak.stderr
    table = {}
    for line in soak.stdout.splitlines():
        for figure in (
            "invariant violations",
            "reservations lost",
            "kills and stalls",
            "nodes struck again after their return",
        ):
            if line.startswith(figure):
                table[figure] = line.removeprefix(figure).split()[0]
    assert (table["invariant violations"], table["reservations lost"]) == ("0", "0"), soak.stdout
    assert int(table["kills and stalls"]) >= 6, soak.stdout  # every kind at least once
    # A node returned to service and struck within the window: the cap counts its new incident.
    assert int(table["nodes struck again after their return"]) >= 1, soak.stdout
    # The tenants call with keys of several members and scopes: an organisation's, a member's, a read key.
    calls = {line.split()[4] for line in soak.stdout.splitlines() if line.startswith("operations: calls with the ")}
    assert calls == {"organisation", "member", "read"}, soak.stdout
    # Every kind of fault strikes in a minute's run: on the nodes, and on the fabrics (a manager down,
    # refusing, slow, and a port moved by hand).
    (injected,) = [
        line.removeprefix("faults injected") for line in soak.stdout.splitlines() if line.startswith("faults injected")
    ]
    struck = {kind_and_count.split()[0] for kind_and_count in injected.strip().split(", ")}
    assert struck == {"xid", "bmc_error", "bmc_timeout", "erase_hang", "implant"}, soak.stdout
    fabric_faults = {line.split()[2] for line in soak.stdout.splitlines() if line.startswith("fabric faults: ")}
    assert fabric_faults == {"fabric_api_down", "fabric_apply_fails", "fabric_slow", "fabric_drift"}, soak.stdout
