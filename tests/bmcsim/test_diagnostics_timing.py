"""The agent's diagnostics on a bmcsim whose clock runs (SIM_TIME_SCALE=0.001): each level takes
DCGM's time, scaled, and DELETE /diagnostics stops a long run at once so it can be preempted."""

from __future__ import annotations

import time

import pytest

from agent.sim import DIAGNOSTICS_S
from tests.support.bmcsim import start_bmcsim
from tests.support.processes import wait_for

SCALE = 0.001
NODE = "node-001"

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def running_clock(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim-clock") / "data", nodes=2, scale=str(SCALE))
    sim.boot_with_config_drive(NODE)
    wait_for("the agent to answer", lambda: sim.get(f"/agent/{NODE}/metrics").status_code == 200, 10)
    yield sim
    sim.stop()


def diagnostics(sim) -> dict:
    r = sim.get(f"/agent/{NODE}/diagnostics")
    assert r.status_code == 200, r.text
    return r.json()


def test_the_levels_last_as_long_as_dcgms_do():
    assert DIAGNOSTICS_S[1] <= 30  # seconds
    assert 90 <= DIAGNOSTICS_S[2] <= 180  # about 2 minutes
    assert 600 <= DIAGNOSTICS_S[3] <= 1200  # about 15 minutes
    assert 3600 <= DIAGNOSTICS_S[4] <= 7200  # 1 to 2 hours


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_run_takes_its_levels_time_scaled(running_clock, level):
    started = running_clock.post(f"/agent/{NODE}/diagnostics", json={"level": level})
    assert started.status_code == 202, started.text
    wait_for("the run to end", lambda: diagnostics(running_clock)["state"] != "running", 10, interval=0.02)
    run = diagnostics(running_clock)
    assert run["state"] == "succeeded" and run["results"]
    assert run["finished_at"] - run["started_at"] == pytest.approx(DIAGNOSTICS_S[level] * SCALE)


def test_delete_cancels_a_long_run_within_a_second(running_clock):
    r = running_clock.post(f"/agent/{NODE}/diagnostics", json={"level": 4})  # 5.4 s at this scale
    assert r.status_code == 202 and r.json()["state"] == "running"
    assert running_clock.post(f"/agent/{NODE}/diagnostics", json={"level": 1}).status_code == 409

    asked = time.time()
    cancelled = running_clock.delete(f"/agent/{NODE}/diagnostics")
    assert time.time() - asked < 1.0
    assert cancelled.status_code == 202
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["level"] == 4 and body["results"] == []
    assert asked - 1.0 < body["finished_at"] < asked + 1.0
    assert body["finished_at"] - body["started_at"] < DIAGNOSTICS_S[4] * SCALE
    time.sleep(DIAGNOSTICS_S[4] * SCALE / 10)
    assert diagnostics(running_clock) == body  # it stays stopped

    again = running_clock.delete(f"/agent/{NODE}/diagnostics")  # nothing runs: the run as it stands
    assert again.status_code == 202 and again.json() == body
    running_clock.reset(NODE, "ForceRestart")
    wait_for("the agent to answer", lambda: running_clock.get(f"/agent/{NODE}/metrics").status_code == 200, 10)
    assert diagnostics(running_clock)["state"] == "cancelled"  # a reboot does not rewrite it

    assert running_clock.post(f"/agent/{NODE}/diagnostics", json={"level": 1}).status_code == 202


def test_cancelling_needs_the_token_and_an_answering_agent(running_clock):
    assert running_clock.delete(f"/agent/{NODE}/diagnostics", auth=None).status_code == 401
    running_clock.reset(NODE, "ForceOff")
    try:
        r = running_clock.delete(f"/agent/{NODE}/diagnostics")
        assert r.status_code == 503 and r.json()["detail"] == f"{NODE} is powered off"
    finally:
        running_clock.reset(NODE, "On")
        wait_for("the agent to answer", lambda: running_clock.get(f"/agent/{NODE}/metrics").status_code == 200, 10)
