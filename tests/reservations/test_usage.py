"""Usage records: node-seconds from holds, node states and the reservation's own history
(reservations/usage.py), GET /v1/usage, the monthly node-hours quota, and the admin's CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from fleet.models import Node, Pod
from reservations import services
from reservations.models import Quota, Reservation, Tenant
from reservations.usage import Hold, Span, calendar_month, months, node_seconds, spans
from tests.support.api import key_client, member_key, post
from tests.support.factories import drive
from tests.support.time_passing import reservation_ages

H = timedelta(hours=1)
WAIT = timedelta(seconds=10)  # how long the usage test lets pass, twice
T0 = datetime(2026, 11, 30, 20, tzinfo=UTC)


def test_only_time_a_held_node_was_up_counts_and_degraded_time_is_apart():
    holds = [Hold("a", Span(T0, T0 + 4 * H), False), Hold("b", Span(T0, T0 + 2 * H), False)]
    active = {"a": [Span(T0 + H, T0 + 5 * H)], "b": [Span(T0 - H, T0 + H)]}  # a up late, b lost at 1 h
    degraded = [Span(T0 + H, T0 + 3 * H)]
    figures = node_seconds(holds, active, degraded, Span(T0 - 9 * H, T0 + 9 * H))
    assert figures == {
        "node_seconds_active": 3600 * (1 + 1),  # b's first hour, a's last hour
        "node_seconds_degraded": 3600 * 2,  # a's hours while the reservation missed b
        "node_seconds_replacement": 0,
    }


def test_a_replacement_held_but_not_up_yet_is_counted_apart_within_the_window():
    holds = [Hold("c", Span(T0, T0 + 3 * H), True)]
    figures = node_seconds(
        holds, {"c": [Span(T0 + H, T0 + 3 * H)]}, [], Span(T0 + 30 * timedelta(minutes=1), T0 + 2 * H)
    )
    assert figures == {"node_seconds_active": 3600, "node_seconds_degraded": 0, "node_seconds_replacement": 1800}


def test_spans_and_months():
    changes = [(T0, True), (T0 + H, False), (T0 + 2 * H, True)]
    assert spans(changes, until=T0 + 3 * H) == [Span(T0, T0 + H), Span(T0 + 2 * H, T0 + 3 * H)]
    assert calendar_month(T0) == Span(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    assert months(Span(T0, T0 + 10 * H)) == [
        Span(T0, datetime(2026, 12, 1, tzinfo=UTC)),
        Span(datetime(2026, 12, 1, tzinfo=UTC), T0 + 10 * H),
    ]
    assert calendar_month(datetime(2026, 12, 31, 23, tzinfo=UTC)).end == datetime(2027, 1, 1, tzinfo=UTC)


def test_usage_counts_up_time_and_degraded_time_through_the_api(acme, available_fleet):
    tenant = Tenant.objects.get(name="acme")
    mine = services.create_reservation(
        tenant=tenant, node_count=2, pod=Pod.objects.get(name="p2"), ends_at=timezone.now() + H, actor="t"
    )
    nodes = list(Node.objects.filter(reservation=mine))
    for node in nodes:
        drive(node, "provision_succeeded", reservation=mine)
    services.settle_reservation(reservation_id=mine.pk)
    reservation_ages(mine, by=WAIT)
    services.let_node_go(node_id=nodes[0].pk, reservation_id=mine.pk, reason="test", actor="t")
    reservation_ages(mine, by=WAIT)
    answer = acme.get("/v1/usage")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    (row,) = body["results"]
    assert row["reservation"] == mine.pk
    # Two nodes up for WAIT, then the second node for WAIT while the first was lost (and each for
    # the moments the test took besides).
    assert 2 * WAIT.seconds <= row["node_seconds_active"] < 3 * WAIT.seconds
    assert WAIT.seconds <= row["node_seconds_degraded"] < 2 * WAIT.seconds
    assert body["total"] == {k: v for k, v in row.items() if k not in ("reservation", "user")}
    assert [m["month"] for m in body["months"]] == [timezone.now().strftime("%Y-%m")]


def test_usage_is_read_per_member_who_made_each_reservation(available_fleet):
    ada, bob = (key_client(member_key("acme", name, "member")) for name in ("ada", "bob"))
    made = {
        name: post(client, "/v1/reservations", {"node_count": 1}).json()["id"]
        for name, client in [("ada", ada), ("bob", bob)]
    }
    for reservation in Reservation.objects.filter(pk__in=made.values()):
        (node,) = Node.objects.filter(reservation=reservation)
        drive(node, "provision_succeeded", reservation=reservation)
        services.settle_reservation(reservation_id=reservation.pk)
        reservation_ages(reservation, by=WAIT)
    body = bob.get("/v1/usage").json()  # a member reads the whole organisation's, by member
    assert {row["reservation"]: row["user"] for row in body["results"]} == {made["ada"]: "ada", made["bob"]: "bob"}
    assert [member["user"] for member in body["members"]] == ["ada", "bob"]
    for member in body["members"]:
        (own,) = [row for row in body["results"] if row["user"] == member["user"]]
        assert member["node_seconds_active"] == own["node_seconds_active"] >= WAIT.seconds
    figures = ("node_seconds_active", "node_seconds_degraded", "node_seconds_replacement")
    assert {k: sum(m[k] for m in body["members"]) for k in figures} == body["total"]


def test_usage_is_the_tenants_own_and_refuses_a_bad_window(acme, globex, available_fleet):
    services.create_reservation(tenant=Tenant.objects.get(name="globex"), node_count=1, actor="t")
    assert globex.get("/v1/usage").json()["results"] and not acme.get("/v1/usage").json()["results"]
    now = timezone.now()
    for query, says in [
        ({"from": "yesterday"}, "from"),
        ({"from": now.isoformat(), "to": (now - H).isoformat()}, "before"),
        ({"from": (now - timedelta(days=500)).isoformat()}, "at most 400 days"),
        ({"since": now.isoformat()}, "unknown"),
    ]:
        answer = acme.get("/v1/usage", query)
        assert answer.status_code == 400 and says in answer.json()["detail"], (query, answer.content)


def test_the_monthly_node_hours_quota_counts_what_is_booked(acme, available_fleet):
    tenant = Tenant.objects.get(name="acme")
    Quota.objects.create(tenant=tenant, node_hours_per_month=10)
    services.create_reservation(tenant=tenant, node_count=1, ends_at=timezone.now() + H, actor="t")
    used = acme.get("/v1/quota").json()
    assert used["limits"]["node_hours_per_month"] == 10
    assert 0 < used["used"]["node_hours_this_month"] <= 1.0
    start = calendar_month(timezone.now()).end + H  # next month: all of it ahead
    services.create_reservation(
        tenant=tenant, node_count=4, pod=Pod.objects.get(name="p1"), starts_at=start, ends_at=start + 2 * H, actor="t"
    )
    later = {
        "node_count": 3,
        "pod": "p1",
        "starts_at": (start + 3 * H).isoformat(),
        "ends_at": (start + 4 * H).isoformat(),
    }
    answer = acme.post("/v1/reservations", later, format="json")
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        f"your quota is 10 node-hours a month; you have 8.0 booked in {start:%Y-%m} and asked for 3.0 more there"
    )
    later["node_count"] = 2
    assert acme.post("/v1/reservations", later, format="json").status_code == 201  # 8 + 2 fits exactly


def test_the_admin_exports_usage_as_csv(admin_client, available_fleet):
    tenant = Tenant.objects.create(name="initech")
    services.create_reservation(tenant=tenant, node_count=1, actor="t")
    answer = admin_client.post(
        "/admin/reservations/tenant/", {"action": "export_usage_csv", "_selected_action": [tenant.pk]}
    )
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert (
        rows
        and rows[0]["tenant"] == "initech"
        and set(rows[0])
        >= {
            "month",
            "reservation",
            "node_seconds_active",
            "node_seconds_degraded",
            "node_seconds_replacement",
        }
    )
