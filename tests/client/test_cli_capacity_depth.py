"""`gpufleet capacity --depth N`: GET /v1/capacity?depth=N, its domains listed so many fabric
levels below each pod. The 12-node fleet: p1 is r01 under p1-leaf1, p2 is r02 under p2-leaf1."""

from __future__ import annotations

import json

import requests


def table_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def server(tenant, **params) -> dict:
    return requests.get(tenant.env["GPUFLEET_URL"] + "/v1/capacity", params=params, timeout=10).json()


def test_depth_is_asked_of_the_server_and_its_answer_printed_as_is(anonymous, available_fleet):
    for depth in ("0", "1", "2"):
        completed = anonymous.run("capacity", "--depth", depth, "--json")
        assert completed.returncode == 0, completed.stderr
        answer = json.loads(completed.stdout)
        assert answer == server(anonymous, depth=depth) and answer["depth"] == int(depth)
    assert json.loads(anonymous.run("capacity", "--json").stdout)["depth"] == 2  # the server's default


def test_the_domains_at_the_cut_are_printed_and_none_at_depth_zero(anonymous, available_fleet):
    leaves = anonymous.run("capacity", "--depth", "1")
    assert leaves.returncode == 0, leaves.stderr
    assert table_rows(leaves.stdout.split("\n\n")[1]) == [
        ["DOMAIN", "LEVEL", "NODES", "FREE"],
        ["p1-leaf1", "leaf", "8", "8"],
        ["p2-leaf1", "leaf", "4", "4"],
    ]
    pods_alone = anonymous.run("capacity", "--depth", "0")
    assert pods_alone.returncode == 0 and "\n\n" not in pods_alone.stdout.strip()


def test_a_depth_that_is_not_a_whole_number_is_a_usage_error(anonymous):
    for depth in ("-1", "two"):
        completed = anonymous.run("capacity", "--depth", depth)
        assert completed.returncode == 2 and "is not a whole number (0 or more)" in completed.stderr
