"""A tenant's page, /my/reservations: reserving, changing and releasing from the browser, the
webhooks' deliveries and this month's usage, through Django's test client on the real PostgreSQL."""

import html
import re
from datetime import timedelta

import hypothesis
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.test import Client
from django.utils import timezone
from hypothesis import strategies as st

from core.topology import GPU_MODEL
from fleet import services as fleet_services
from fleet.models import AddressPool, Image, Node, Pod
from reservations import services as reservations
from reservations.models import Quota, Reservation, Webhook, WebhookDelivery, WebhookEvent
from reservations.placement import PlacementRefused
from tests.support.examples import examples
from tests.support.factories import bring_up
from tests.support.hostile import HOSTILE_TEXT
from tests.support.time_passing import reservation_ages

PAGE = "/my/reservations"
H = timedelta(hours=1)


def ssh_key(tenant, name: str):
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return reservations.add_ssh_key(tenant=tenant, name=name, public_key=line)


def reserve(tenant, count: int, pod: str, *, starts_at=None, ends_at=None) -> Reservation:
    return reservations.create_reservation(
        tenant=tenant,
        node_count=count,
        pod=Pod.objects.get(name=pod),
        starts_at=starts_at,
        ends_at=ends_at or (starts_at or timezone.now()) + 2 * H,
        actor="test",
    )


def page(client) -> str:
    answer = client.get(PAGE)
    assert answer.status_code == 200
    return answer.content.decode()


def form_block(text: str, name: str) -> str:
    found = re.search(rf'(<form [^>]*data-form="{name}">.*?</form>)', text, re.S)
    assert found, f"no {name} form on the page"
    return found.group(1)


def group_of(pattern: str, text: str, flags: int = 0) -> str:
    """The first group of `pattern` in `text`, which must be there."""
    match = re.search(pattern, text, flags)
    assert match, f"{pattern!r} is not on the page"
    return match.group(1)


def hidden_fields(block: str) -> dict[str, list[str]]:
    """What the browser posts from a form of hidden fields only, as the test client takes it."""
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', block):
        fields.setdefault(html.unescape(name), []).append(html.unescape(value))
    return fields


def errors_of(text: str, field_id: str) -> str:
    """The errors Django renders next to the field whose id is `field_id`."""
    found = re.search(rf'<ul class="errorlist" id="{field_id}_error">(.*?)</ul>', text, re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))) if found else ""


@pytest.fixture
def catalogue(db):
    Image.objects.create(name="ubuntu-24-04", os="ubuntu-24.04", url="http://img/u.iso", sha256="ab" * 32, default=True)
    return Image.objects.create(name="rocky-9", os="rocky-9", url="http://img/r.iso", sha256="cd" * 32)


# -- the reserve form ----------------------------------------------------------------------


def test_the_tenant_page_shows_the_form_with_capacity_quota_images_and_only_the_tenants_keys(
    alice_client, alice, bob, available_fleet, catalogue
):
    mine, theirs = ssh_key(alice, "laptop"), ssh_key(bob, "bobs-laptop")
    Quota.objects.create(tenant=alice, nodes=6)
    reserve(bob, 2, "p1")
    text = page(alice_client)
    reserve_form = form_block(text, "reserve")
    for field in ["node_count", "pod", "rack_scale", "preferred", "gpu_model", "starts_at", "ends_at", "hours", "wait"]:
        assert f'name="{field}"' in reserve_form, field
    assert re.search(r'<option value="" selected>no preference</option>\s*<option value="leaf">leaf</option>', text)
    assert f'<option value="{GPU_MODEL}">{GPU_MODEL}</option>' in reserve_form
    assert re.search(r'data-capacity="p1"><th scope="row">p1</th><td>8</td><td>6</td><td>0</td>', text)
    assert re.search(r'data-capacity="p2"><th scope="row">p2</th><td>4</td><td>4</td><td>1</td>', text)
    assert re.search(r'data-quota="nodes"><th scope="row">nodes at once</th><td>6</td><td>0</td>', text)
    assert re.search(r'<option value="ubuntu-24-04" selected>ubuntu-24-04 \(ubuntu-24.04\) · default</option>', text)
    assert '<option value="rocky-9">rocky-9 (rocky-9)</option>' in text
    assert re.search(r'<option value="" selected>any</option>\s*<option value="p1">p1</option>', reserve_form)
    assert f'value="{mine.pk}"' in reserve_form and f"laptop {mine.fingerprint}" in reserve_form
    assert theirs.fingerprint not in text and "bobs-laptop" not in text
    assert "If it does not fit now, queue it at the earliest time it fits" in reserve_form


def test_a_valid_reserve_creates_the_reservation_and_redirects_to_it_with_a_message(
    alice_client, alice, available_fleet, catalogue
):
    key = ssh_key(alice, "laptop")
    answer = alice_client.post(
        PAGE,
        {
            "node_count": "2",
            "pod": "p2",
            "hours": "3",
            "image": "rocky-9",
            "ssh_keys": [str(key.pk)],
            "user_data": "#!/bin/sh\r\necho hello\r\n",
        },
    )
    reservation = Reservation.objects.get(tenant=alice)
    assert answer.status_code == 302 and answer["Location"] == f"{PAGE}#reservation-{reservation.pk}"
    assert reservation.pod is not None and reservation.image is not None and reservation.ends_at is not None
    assert (reservation.node_count, reservation.pod.name, reservation.image.name) == (2, "p2", "rocky-9")
    assert list(reservation.ssh_keys.all()) == [key]
    assert reservation.user_data == "#!/bin/sh\necho hello\n"  # the browser's CRLF, as the script needs it
    # The form counts the hours from its own now, the service starts at its own a moment later.
    assert abs(reservation.ends_at - reservation.starts_at - 3 * H) < timedelta(seconds=1)
    assert reservation.state == "provisioning" and Node.objects.filter(reservation=reservation).count() == 2
    text = page(alice_client)
    assert f"Reservation {reservation.pk}: 2 node(s) in p2" in text  # the message, once
    assert f'data-reservation="{reservation.pk}"' in text
    assert f"Reservation {reservation.pk}: 2 node(s)" not in page(alice_client)


def test_a_preference_for_few_leaves_and_a_gpu_model_reach_the_reservation(alice_client, alice, available_fleet):
    answer = alice_client.post(PAGE, {"node_count": "2", "preferred": "leaf", "gpu_model": GPU_MODEL, "hours": "1"})
    assert answer.status_code == 302
    reservation = Reservation.objects.get(tenant=alice)
    assert (reservation.preferred_level, reservation.gpu_model) == ("leaf", GPU_MODEL)
    assert f"in {reservation.placed_in}, on as few leaf domains as it can" in page(alice_client)
    unknown = alice_client.post(PAGE, {"node_count": "1", "preferred": "rail", "gpu_model": "GB300"})
    assert unknown.status_code == 400
    assert "Select a valid choice. rail is not one of the available choices." in html.unescape(unknown.content.decode())


def test_a_reservation_without_an_image_boots_the_default_and_with_an_end_keeps_it(
    alice_client, alice, available_fleet, catalogue
):
    ends_at = (timezone.now() + 5 * H).replace(second=0, microsecond=0)
    answer = alice_client.post(PAGE, {"node_count": "1", "ends_at": ends_at.strftime("%Y-%m-%dT%H:%M")})
    assert answer.status_code == 302
    reservation = Reservation.objects.get(tenant=alice)
    assert reservation.image is not None
    assert (reservation.image.name, reservation.ends_at, reservation.pod) == ("ubuntu-24-04", ends_at, None)


def test_a_duration_counts_from_now_when_the_start_is_past(alice_client, alice, available_fleet):
    assert (
        alice_client.post(PAGE, {"node_count": "1", "starts_at": "2000-01-01T00:00", "hours": "2"}).status_code == 302
    )
    reservation = Reservation.objects.get(tenant=alice)
    assert reservation.ends_at is not None
    assert abs(reservation.ends_at - reservation.starts_at - 2 * H) < timedelta(seconds=1)
    assert abs(reservation.starts_at - timezone.now()) < timedelta(seconds=5)


def test_a_refusal_shows_the_reason_and_an_offer_whose_button_books_exactly_it(
    alice_client, alice, bob, available_fleet
):
    bobs = reserve(bob, 8, "p1")  # p1 is busy for two hours
    answer = alice_client.post(PAGE, {"node_count": "8", "pod": "p1", "hours": "1", "rack_scale": "on"})
    assert answer.status_code == 409
    text = answer.content.decode()
    refusal = group_of(r"<strong>Not reserved:</strong> (.*?)</p>", text)
    with pytest.raises(PlacementRefused) as service:
        reservations.create_reservation(
            tenant=alice, node_count=8, pod=Pod.objects.get(name="p1"), rack_scale=True, ends_at=bobs.ends_at, actor="t"
        )
    assert refusal == html.escape(service.value.reason)
    assert f"It fits in pod <strong>p1</strong> from {bobs.ends_at:%Y-%m-%d %H:%M} to" in text
    assert not Reservation.objects.filter(tenant=alice).exists()
    # The form keeps what was asked, to change it.
    assert 'name="node_count" value="8"' in form_block(text, "reserve")

    offer = hidden_fields(form_block(text, "offer"))
    assert (offer["pod"], offer["node_count"], offer["rack_scale"]) == (["p1"], ["8"], ["on"])
    assert "wait" not in offer
    answer = alice_client.post(PAGE, offer)
    assert answer.status_code == 302
    booked = Reservation.objects.get(tenant=alice)
    assert booked.pod is not None and booked.ends_at is not None
    assert (booked.state, booked.pod.name, booked.node_count, booked.rack_scale) == ("pending", "p1", 8, True)
    assert [booked.starts_at.isoformat()] == offer["starts_at"] and [booked.ends_at.isoformat()] == offer["ends_at"]
    assert booked.starts_at == bobs.ends_at and abs(booked.ends_at - booked.starts_at - H) < timedelta(seconds=1)


def test_wait_queues_a_pending_reservation_at_the_earliest_time_it_fits(alice_client, alice, bob, available_fleet):
    bobs = reserve(bob, 8, "p1")
    answer = alice_client.post(PAGE, {"node_count": "8", "hours": "1", "wait": "on"})
    assert answer.status_code == 302
    queued = Reservation.objects.get(tenant=alice)
    assert queued.pod is not None
    assert (queued.state, queued.pod.name, queued.starts_at) == ("pending", "p1", bobs.ends_at)
    assert queued.reason.startswith("queued")
    assert f"Reservation {queued.pk}: 8 node(s) in p1" in page(alice_client)


def test_a_request_that_fits_nowhere_says_so_without_an_offer(alice_client, available_fleet):
    answer = alice_client.post(PAGE, {"node_count": "13", "hours": "1"})
    text = answer.content.decode()
    assert answer.status_code == 409 and "Not reserved:" in text
    assert 'data-form="offer"' not in text and "Nothing fits it within the booking horizon" in text


def test_a_quota_refusal_says_which_limit(alice_client, alice, available_fleet):
    Quota.objects.create(tenant=alice, nodes=1)
    answer = alice_client.post(PAGE, {"node_count": "2", "hours": "1"})
    assert answer.status_code == 403
    assert "your quota is 1 nodes at once; you hold 0 over that period and asked for 2 more" in answer.content.decode()
    assert not Reservation.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"node_count": "0"}, "node_count", "greater than or equal to 1"),
        ({"node_count": ""}, "node_count", "This field is required"),
        ({"node_count": "١٢"}, "node_count", "is not a whole number in the digits 0 to 9"),
        ({"node_count": "9" * 40}, "node_count", "less than or equal to 10000"),
        ({"starts_at": "2030-01-02T10:00", "ends_at": "2030-01-02T09:00"}, "ends_at", "must be after the start"),
        ({"ends_at": "2030-13-45T10:00"}, "ends_at", "Enter a valid date/time"),
        ({"ends_at": "2030-01-02T10:00", "hours": "2"}, "hours", "give an end or a duration, not both"),
        ({"hours": "0"}, "hours", "greater than or equal to 1"),
        ({"hours": "9" * 12}, "hours", "less than or equal to"),
        ({"starts_at": "9999-12-31T23:00", "hours": "24"}, "hours", "ends past the last date there is"),
        ({"pod": "p9"}, "pod", "Select a valid choice"),
        ({"pod": "p1\x00"}, "pod", "Select a valid choice"),
        ({"image": "windows-95"}, "image", "Select a valid choice"),
        ({"ssh_keys": ["999999"]}, "ssh_keys", "Select a valid choice"),
        ({"user_data": "a\x00b"}, "user_data", "Null characters are not allowed"),
        ({"user_data": "é" * 8193}, "user_data", "at most 16384 bytes; this is 16386"),
        # The service's own rules for a period, next to the field they name.
        ({"starts_at": "2099-01-01T00:00", "hours": "1"}, "starts_at", "must be at most 90 days from now"),
        ({"starts_at": "2000-01-01T00:00", "ends_at": "2000-01-01T01:00"}, "ends_at", "must be after starts_at"),
        ({"hours": "2000"}, "hours", "must be at most 30 days after starts_at"),
        ({"starts_at": "0001-01-01T00:00+05:00", "ends_at": "0001-01-01T01:00+05:00"}, "ends_at", "after now"),
        ({"ends_at": "9999-12-31T23:59-05:00"}, "ends_at", "must be at most 30 days after starts_at"),
    ],
)
def test_bad_input_is_a_400_with_the_error_next_to_its_field(alice_client, available_fleet, fields, field, says):
    answer = alice_client.post(PAGE, {"node_count": "1", **fields})
    assert answer.status_code == 400
    assert says in errors_of(answer.content.decode(), f"id_{field}")
    assert not Reservation.objects.exists()


# What a browser can send: UTF-8, a lone surrogate replaced; and dates at the ends of the calendar.
FORM_TEXT = HOSTILE_TEXT.map(lambda text: text.encode("utf-8", "replace").decode())
DATES = st.builds(
    lambda moment, offset: moment.isoformat(timespec="minutes") + offset,
    st.datetimes(),
    st.sampled_from(["", "Z", "+05:00", "-05:00", "+14:00"]),
)
VALUES = FORM_TEXT | DATES | st.sampled_from(["1", "2", "p1", "p2", "on", "rocky-9"])


def test_no_posted_form_is_a_server_error(alice, available_fleet, catalogue, django_user_model):
    alice.user = django_user_model.objects.create_user("alice", password="alice-password-1")
    alice.save()
    browser = Client(raise_request_exception=False)
    browser.force_login(alice.user)
    mine = reserve(alice, 1, "p2")
    forms = {
        PAGE: [
            *("node_count", "pod", "rack_scale", "preferred", "gpu_model", "starts_at", "ends_at", "hours"),
            *("image", "ssh_keys", "user_data"),
        ],
        f"{PAGE}/{mine.pk}/extend": ["ends_at", "hours"],
        f"{PAGE}/{mine.pk}/node-count": ["node_count"],
    }

    @hypothesis.settings(max_examples=examples(120), deadline=None, database=None)
    @hypothesis.given(st.sampled_from(sorted(forms)), st.data())
    def post_any(path, data):
        fields = data.draw(st.dictionaries(st.sampled_from(forms[path]), VALUES | st.lists(VALUES, max_size=3)))
        answer = browser.post(path, fields)
        assert answer.status_code in (302, 400, 403, 409), (path, fields, answer.status_code)

    post_any()


# -- changing a reservation ------------------------------------------------------------------


def test_extend_grow_shrink_and_release_from_the_row(alice_client, alice, available_fleet):
    mine = reserve(alice, 1, "p2")
    end = mine.ends_at
    assert end is not None
    text = page(alice_client)
    for name in ["extend", "node-count", "release"]:
        assert f'action="{PAGE}/{mine.pk}/{name}"' in form_block(text, name)

    answer = alice_client.post(f"{PAGE}/{mine.pk}/extend", {"hours": "3"})
    assert answer.status_code == 302 and answer["Location"] == f"{PAGE}#reservation-{mine.pk}"
    assert Reservation.objects.get(pk=mine.pk).ends_at == end + 3 * H
    new_end = (end + 5 * H).replace(second=0, microsecond=0)
    assert alice_client.post(f"{PAGE}/{mine.pk}/extend", {"ends_at": f"{new_end:%Y-%m-%dT%H:%M}"}).status_code == 302
    assert Reservation.objects.get(pk=mine.pk).ends_at == new_end
    assert f"Reservation {mine.pk}: 1 node(s) until {new_end:%Y-%m-%d %H:%M} UTC" in page(alice_client)

    assert alice_client.post(f"{PAGE}/{mine.pk}/node-count", {"node_count": "3"}).status_code == 302
    assert Reservation.objects.get(pk=mine.pk).node_count == 3
    assert Node.objects.filter(reservation=mine).count() == 3
    assert alice_client.post(f"{PAGE}/{mine.pk}/node-count", {"node_count": "2"}).status_code == 302
    assert Reservation.objects.get(pk=mine.pk).node_count == 2

    assert alice_client.post(f"{PAGE}/{mine.pk}/release").status_code == 302
    released = Reservation.objects.get(pk=mine.pk)
    assert released.state == "released"
    text = page(alice_client)
    assert f"Reservation {mine.pk} is released" in text
    assert f'action="/my/reservations/{mine.pk}/release"' not in text  # nothing left to change


def test_an_extension_into_another_booking_shows_the_latest_end_it_can_have(alice_client, alice, bob, available_fleet):
    mine = reserve(alice, 4, "p2")
    assert mine.ends_at is not None
    theirs = reserve(bob, 4, "p2", starts_at=mine.ends_at + H)
    answer = alice_client.post(f"{PAGE}/{mine.pk}/extend", {"hours": "2"})
    assert answer.status_code == 409
    text = html.unescape(answer.content.decode())
    until = theirs.starts_at.isoformat()
    assert f"is booked from {until}: this reservation can be extended until {until}" in text
    assert re.search(
        rf'<details open><summary>Extend</summary>\s*<form method="post" action="{PAGE}/{mine.pk}/extend"', text
    )
    assert Reservation.objects.get(pk=mine.pk).ends_at == mine.ends_at


@pytest.mark.parametrize(
    ("path", "fields", "status", "field", "says"),
    [
        ("extend", {}, 400, None, "give a new end or a number of hours to add, one of the two"),
        ("extend", {"hours": "1", "ends_at": "2030-01-01T00:00"}, 400, None, "one of the two"),
        ("extend", {"hours": "-1"}, 400, "hours", "is not a whole number"),
        ("extend", {"ends_at": "2000-01-01T00:00"}, 400, "ends_at", "must be more than a minute from now"),
        ("extend", {"hours": "2000"}, 400, "hours", "must be at most 30 days after starts_at"),
        ("node-count", {"node_count": "0"}, 400, "node_count", "greater than or equal to 1"),
        ("node-count", {"node_count": "x"}, 400, "node_count", "is not a whole number"),
        ("node-count", {"node_count": "9"}, 409, None, "p2"),  # p2 has 4 nodes
    ],
)
def test_a_change_refused_says_why_in_the_rows_form(
    alice_client, alice, available_fleet, path, fields, status, field, says
):
    mine = reserve(alice, 2, "p2")
    answer = alice_client.post(f"{PAGE}/{mine.pk}/{path}", fields)
    assert answer.status_code == status
    text = answer.content.decode()
    if field:
        prefix = "extend" if path == "extend" else "nodes"
        assert says in errors_of(text, f"r{mine.pk}-{prefix}-{field}")
    else:
        assert says in html.unescape(group_of(r'<div class="errors" role="alert">(.*?)</div>', text, re.S))
    unchanged = Reservation.objects.get(pk=mine.pk)
    assert (unchanged.ends_at, unchanged.node_count) == (mine.ends_at, 2)


def test_a_released_reservation_cannot_change(alice_client, alice, available_fleet):
    mine = reserve(alice, 1, "p2")
    reservations.release_reservation(reservation_id=mine.pk, actor="test")
    answer = alice_client.post(f"{PAGE}/{mine.pk}/extend", {"hours": "1"})
    assert answer.status_code == 409
    assert f"reservation {mine.pk} is released: it cannot change" in answer.content.decode()


def test_the_machines_serving_a_reservation_are_shown_with_address_port_and_host_key(
    alice_client, alice, available_fleet
):
    AddressPool.objects.create(
        pod=Pod.objects.get(name="p2"), network="10.100.2.0/29", gateway="10.100.2.1", ssh_port=2222
    )
    mine = reserve(alice, 1, "p2")
    node = Node.objects.get(reservation=mine)
    fleet_services.assign_address(node_id=node.pk)
    fleet_services.record_host_key(node_id=node.pk, fingerprint="SHA256:abc")
    text = page(alice_client)
    assert re.search(
        rf'data-machine="{node.name}"><td>{node.name}</td><td>provisioning</td><td>10.100.2.2</td><td>2222</td>'
        r"<td><code>SHA256:abc</code></td>",
        text,
    )


# -- whose it is ---------------------------------------------------------------------------


def test_another_tenants_reservation_or_delivery_is_a_404_and_stays_as_it_was(
    alice_client, alice, bob, available_fleet
):
    theirs = reserve(bob, 1, "p2")
    hook = Webhook.objects.create(
        tenant=bob, url="https://bob.example/hook", events=["reservation.released"], secret="s"
    )
    delivery = WebhookDelivery.objects.create(
        webhook=hook, message_id="msg_1", event="reservation.released", payload={}
    )
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="failed", attempts=6)
    for path, fields in [("extend", {"hours": "1"}), ("node-count", {"node_count": "2"}), ("release", {})]:
        assert alice_client.post(f"{PAGE}/{theirs.pk}/{path}", fields).status_code == 404, path
    assert alice_client.post(f"/my/webhooks/{hook.pk}/deliveries/{delivery.pk}/redeliver").status_code == 404
    for missing in ["999999", "9" * 30]:
        assert alice_client.post(f"{PAGE}/{missing}/release").status_code == 404
    unchanged = Reservation.objects.get(pk=theirs.pk)
    assert (unchanged.state, unchanged.node_count, unchanged.ends_at) == ("provisioning", 1, theirs.ends_at)
    assert WebhookDelivery.objects.get(pk=delivery.pk).state == "failed"
    assert f'data-reservation="{theirs.pk}"' not in page(alice_client) and "bob.example" not in page(alice_client)


def every_post(reservation_id: int = 1) -> list[str]:
    return [
        PAGE,
        f"{PAGE}/{reservation_id}/extend",
        f"{PAGE}/{reservation_id}/node-count",
        f"{PAGE}/{reservation_id}/release",
        "/my/webhooks/1/deliveries/1/redeliver",
    ]


def test_a_signed_out_browser_is_sent_to_the_login_and_changes_nothing(client, alice, available_fleet):
    mine = reserve(alice, 1, "p2")
    for path in every_post(mine.pk):
        answer = client.post(path, {"node_count": "1", "hours": "1"})
        assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/?next="), path
    assert Reservation.objects.get().state == "provisioning"


def test_a_user_without_a_tenant_reads_the_notice_and_may_post_nothing(client, django_user_model, available_fleet):
    client.force_login(django_user_model.objects.create_user("carol", password="carol-password-1"))
    assert "Your account is not a tenant's" in page(client)
    for path in every_post():
        assert client.post(path, {"node_count": "1", "hours": "1"}).status_code == 403, path
    assert not Reservation.objects.exists()


def test_every_post_needs_the_csrf_token(alice, django_user_model, available_fleet):
    alice.user = django_user_model.objects.create_user("alice", password="alice-password-1")
    alice.save()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice.user)
    mine = reserve(alice, 1, "p2")
    for path in every_post(mine.pk):
        assert browser.post(path, {"node_count": "1", "hours": "1"}).status_code == 403, path
    token = group_of(r'name="csrfmiddlewaretoken" value="([^"]+)"', page(browser))
    answer = browser.post(f"{PAGE}/{mine.pk}/release", {"csrfmiddlewaretoken": token})
    assert answer.status_code == 302 and Reservation.objects.get(pk=mine.pk).state == "released"


def test_the_sub_pages_answer_post_only(alice_client, alice, available_fleet):
    mine = reserve(alice, 1, "p2")
    for path in every_post(mine.pk)[1:]:
        assert alice_client.get(path).status_code == 405, path


# -- webhooks and usage ----------------------------------------------------------------------


def test_the_webhooks_deliveries_are_listed_and_one_is_sent_again(alice_client, alice, available_fleet):
    hook = Webhook.objects.create(
        tenant=alice, url="https://alice.example/hook", events=[WebhookEvent.RESERVATION_RELEASED], secret="whsec_x"
    )
    mine = reserve(alice, 1, "p2")
    alice_client.post(f"{PAGE}/{mine.pk}/release")
    delivery = WebhookDelivery.objects.get(webhook=hook)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="failed", attempts=6, last_status=503)
    text = page(alice_client)
    assert f'data-webhook="{hook.pk}"' in text and "https://alice.example/hook" in text
    assert "whsec_x" not in text
    row = group_of(rf'<tr data-delivery="{delivery.pk}">(.*?)</tr>', text, re.S)
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
    assert cells[:4] == ["reservation.released", "failed", "6", "503"]
    assert cells[4] == f"{delivery.created_at:%Y-%m-%d %H:%M:%S}"

    answer = alice_client.post(f"/my/webhooks/{hook.pk}/deliveries/{delivery.pk}/redeliver")
    assert answer.status_code == 302 and answer["Location"] == f"{PAGE}#webhook-{hook.pk}"
    again = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (again.state, again.attempts, again.message_id) == ("pending", 0, delivery.message_id)
    assert f"Delivery {delivery.pk} (reservation.released) is queued to be sent again." in page(alice_client)


def test_usage_this_month_is_shown_per_reservation_per_member_and_the_total(alice_client, alice, available_fleet):
    mine = reserve(alice, 2, "p2")
    bring_up(mine)
    reservation_ages(mine, by=timedelta(seconds=10))
    text = page(alice_client)
    row = group_of(rf'<tr data-usage="{mine.pk}">(.*?)</tr>', text, re.S)
    active, degraded, replacement = (int(s) for s in re.findall(r'data-seconds="(\d+)"', row))
    assert 20 <= active < 30 and degraded == replacement == 0  # two nodes up for 10 s (and the moments the test took)
    total = group_of(r'<tr data-usage="total">(.*?)</tr>', text, re.S)
    assert [int(s) for s in re.findall(r'data-seconds="(\d+)"', total)] == [active, degraded, replacement]
    # Per member who made them: here the service's caller, no person (no request named one).
    ((member, figures),) = re.findall(r'<tr data-usage-member="([^"]*)">(.*?)</tr>', text, re.S)
    assert member == "" and [int(s) for s in re.findall(r'data-seconds="(\d+)"', figures)] == [active, 0, 0]
    assert f"Node-hours from {timezone.now():%Y-%m}-01 00:00 to" in text
