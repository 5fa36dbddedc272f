"""`make soak` for a minute: churn by tenants calling with several members' keys and scopes, faults
(a returned node struck again among them, and every fault of the fabrics) and every kind of kill,
a PostgreSQL failover and a Redis failover among them, then no violation and no lost reservation.
The table shows each kill's recovery beside its target; no assertion here times it."""

import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.soak

KILLS = {"worker", "beat", "web", "bmcsim", "postgres-failover", "redis-failover", "stall"}
RECOVERED = ": recovered (probe reservation active) after, s"


def test_a_minute_of_soak_ends_with_no_violation_and_no_lost_reservation():
    # Its PostgreSQL and Redis are its own, on free ports: two runs on one machine never share them.
    soak = subprocess.run(
        [sys.executable, "-m", "tests.soak", "--duration", "60", "--settle-timeout", "240"],
        cwd=REPO_ROOT,
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
            "reservations acknowledged as a PostgreSQL primary died",
        ):
            if line.startswith(figure):
                table[figure] = line.removeprefix(figure).split()[0]
    assert (table["invariant violations"], table["reservations lost"]) == ("0", "0"), soak.stdout
    # Every kind of kill at least once, the failovers of PostgreSQL and Redis among them, each recovered.
    killed = [line.split(RECOVERED)[0].strip() for line in soak.stdout.splitlines() if RECOVERED in line]
    assert set(killed) == KILLS, soak.stdout
    assert int(table["kills and stalls"]) == len(killed) >= len(KILLS), soak.stdout
    # Creates raced the primary's death, and each it acknowledged is in the database (none lost, above).
    assert int(table["reservations acknowledged as a PostgreSQL primary died"]) >= 1, soak.stdout
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
