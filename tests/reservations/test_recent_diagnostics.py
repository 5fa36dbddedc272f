"""Placement prefers, among equal nodes, one with a recent long diagnostics pass: the selectors hand
placement that fact with the free capacity."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node, Pod
from reservations import selectors, services


def passed(name: str, level: int = 3, days_ago: float = 0) -> None:
    when = timezone.now() - timedelta(days=days_ago)
    Node.objects.filter(name=name).update(diagnostic_level=level, diagnostic_passed_at=when)


def reserve_one_in_p2(alice) -> str:
    reservation = services.create_reservation(tenant=alice, node_count=1, pod=Pod.objects.get(name="p2"), actor="t")
    return Node.objects.get(reservation=reservation).name


@pytest.mark.parametrize(
    ("level", "days_ago", "chosen"),
    [(3, 1, "node-011"), (1, 1, "node-009"), (3, 8, "node-009")],
    ids=["recent-long-pass", "short-pass", "old-pass"],
)
def test_a_reservation_gets_the_node_of_the_rack_with_a_recent_long_pass(
    available_fleet, alice, settings, level, days_ago, chosen
):
    settings.DIAGNOSTICS_RECENT_DAYS = 7
    passed("node-011", level, days_ago)  # r02 is p2's one rack: node-009..012
    assert reserve_one_in_p2(alice) == chosen


def test_a_wholly_free_rack_stays_on_placements_fast_path_with_its_passes(available_fleet):
    passed("node-010")
    now = timezone.now()
    r02 = next(r for r in selectors.rack_capacity(starts_at=now, ends_at=now + timedelta(hours=1)) if r.rack == "r02")
    assert r02.recently_tested == {"node-010"}
    assert r02.free is r02.nodes
