"""An organisation's members: listed to any of them, their roles changed and members removed by an
admin (never the last admin), and people invited by a link that works once, for 7 days, and for its
own organisation only; the pages act with the member's role, looked up at every request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from reservations.models import Invitation, Membership, Reservation
from tests.support.api import key_client, member_key, post

pytestmark = pytest.mark.django_db


def members(client) -> dict[str, dict]:
    return {m["username"]: m for m in client.get("/v1/members").json()["results"]}


def browser(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def test_any_member_lists_members_and_only_an_admin_changes_them():
    admin = key_client(member_key("acme", "alice", "admin"))
    viewer = key_client(member_key("acme", "vera", "viewer"))
    listed = members(viewer)
    assert set(listed) == {"alice", "vera"} and set(listed["vera"]) == {"id", "username", "email", "role"}
    vera = listed["vera"]["id"]
    assert viewer.patch(f"/v1/members/{vera}", {"role": "admin"}, format="json").status_code == 403
    changed = admin.patch(f"/v1/members/{vera}", {"role": "member"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "member"
    assert admin.patch(f"/v1/members/{vera}", {"role": "owner"}, format="json").status_code == 400


def test_the_last_admin_can_be_neither_demoted_nor_removed():
    admin = key_client(member_key("acme", "alice", "admin"))
    alice = members(admin)["alice"]["id"]
    assert admin.patch(f"/v1/members/{alice}", {"role": "viewer"}, format="json").status_code == 409
    assert admin.delete(f"/v1/members/{alice}").status_code == 409
    member_key("acme", "bob", "admin")
    assert admin.delete(f"/v1/members/{alice}").status_code == 204
    assert admin.get("/v1/members").status_code == 401  # alice's own key left with her


def test_another_organisations_member_is_404():
    admin = key_client(member_key("acme", "alice", "admin"))
    member_key("globex", "gus", "member")
    gus = Membership.objects.get(user__username="gus").pk
    assert admin.patch(f"/v1/members/{gus}", {"role": "viewer"}, format="json").status_code == 404
    assert admin.delete(f"/v1/members/{gus}").status_code == 404


def test_an_invitation_works_once_for_its_own_organisation_and_expires():
    admin = key_client(member_key("acme", "alice", "admin"))
    invited = post(admin, "/v1/invitations", {"email": "nina@example.com", "role": "viewer"})
    assert invited.status_code == 201, invited.content
    body = invited.json()
    assert set(body) == {"url", "expires_at"} and "/invitations/" in body["url"]
    path = body["url"].split("://", 1)[1].split("/", 1)[1]
    get_user_model().objects.create(username="nina")
    nina = browser("nina")
    shown = nina.get(f"/{path}")
    assert shown.status_code == 200 and b"acme" in shown.content and b"viewer" in shown.content
    assert nina.post(f"/{path}").status_code == 302
    assert Membership.objects.get(user__username="nina").tenant.name == "acme"
    get_user_model().objects.create(username="oscar")
    assert browser("oscar").post(f"/{path}").status_code == 409  # used once
    assert Membership.objects.filter(user__username="oscar").count() == 0

    late = post(admin, "/v1/invitations", {"email": "oscar@example.com"}).json()
    Invitation.objects.filter(email="oscar@example.com").update(
        expires_at=Invitation.objects.get(email="oscar@example.com").created_at + timedelta(microseconds=1)
    )
    late_path = late["url"].split("://", 1)[1].split("/", 1)[1]
    assert browser("oscar").get(f"/{late_path}").status_code == 404
    assert browser("oscar").post(f"/{late_path}").status_code == 409


def test_an_anonymous_browser_is_sent_to_sign_in_and_back():
    admin = key_client(member_key("acme", "alice", "admin"))
    url = post(admin, "/v1/invitations", {"email": "nina@example.com"}).json()["url"]
    path = "/" + url.split("://", 1)[1].split("/", 1)[1]
    answer = Client().get(path)
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def test_only_admins_invite_and_a_viewers_page_posts_nothing(available_fleet):
    member = key_client(member_key("acme", "mo", "member"))
    assert post(member, "/v1/invitations", {"email": "x@example.com"}).status_code == 403
    member_key("acme", "vera", "viewer")
    vera = browser("vera")
    assert b"acme" in vera.get("/my/reservations").content
    assert vera.post("/my/reservations", {"node_count": 1}).status_code == 403
    assert Reservation.objects.count() == 0
    mo = browser("mo")
    assert mo.post("/my/reservations", {"node_count": 1}).status_code in (200, 302)
    assert Reservation.objects.count() == 1


def test_a_removed_member_sees_nothing_of_the_organisation_at_the_next_request():
    member_key("acme", "mo", "member")
    mo = browser("mo")
    assert b"for tenant <strong>acme</strong>" in mo.get("/my/reservations").content
    Membership.objects.filter(user__username="mo").delete()
    page = mo.get("/my/reservations").content
    assert b"for tenant <strong>acme</strong>" not in page
    assert mo.post("/my/reservations", {"node_count": 1}).status_code == 403


def test_a_member_of_two_organisations_picks_one():
    member_key("acme", "mo", "member")
    member_key("globex", "mo", "viewer")
    mo = browser("mo")
    assert b"for tenant <strong>acme</strong>" in mo.get("/my/reservations").content
    assert mo.post("/my/organisation", {"organisation": "globex"}).status_code == 302
    assert b"for tenant <strong>globex</strong> (viewer)" in mo.get("/my/reservations").content
    assert mo.post("/my/organisation", {"organisation": "initech"}).status_code == 404


def test_an_admin_signs_a_member_out_of_the_organisations_pages_until_they_sign_in_again():
    admin = key_client(member_key("acme", "alice", "admin"))
    mo_key = key_client(member_key("acme", "mo", "member"))
    member_key("globex", "mo", "member")
    mo = browser("mo")
    assert b"for tenant <strong>acme</strong>" in mo.get("/my/reservations").content
    mo_id = members(admin)["mo"]["id"]
    assert key_client(member_key("acme", "vera", "viewer")).delete(f"/v1/members/{mo_id}/sessions").status_code == 403
    gus = Membership.objects.get(tenant__name="globex", user__username="mo").pk
    assert admin.delete(f"/v1/members/{gus}/sessions").status_code == 404  # another organisation's

    assert admin.delete(f"/v1/members/{mo_id}/sessions").status_code == 204
    page = mo.get("/my/reservations").content
    assert b"for tenant <strong>acme</strong>" not in page
    assert b"for tenant <strong>globex</strong>" in page  # the other organisation did not sign mo out
    assert mo.post("/my/organisation", {"organisation": "acme"}).status_code == 404
    assert mo_key.get("/v1/members").status_code == 200  # keys are revoked one by one, not by this
    (signed_out,) = admin.get("/v1/activity").json()["results"][:1]
    assert (signed_out["event"], signed_out["detail"], signed_out["user"]) == (
        "member_signed_out",
        {"member": "mo"},
        "alice",
    )

    again = browser("mo")  # signs in again
    assert again.post("/my/organisation", {"organisation": "acme"}).status_code == 302
    assert b"for tenant <strong>acme</strong>" in again.get("/my/reservations").content


def change_form(page) -> dict:
    """What a browser posts back from an admin change page as it was shown (its inlines' rows too)."""
    forms = [page.context["adminform"].form]
    data: dict[str, object] = {}
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        data |= {f"{formset.prefix}-{name}": value for name, value in formset.management_form.initial.items()}
        forms += formset.forms
    for form in forms:
        for field in form:
            value = field.value()
            if value not in (None, False):
                data[field.html_name] = "on" if value is True else value
    return data


def test_an_operators_changes_to_members_in_the_admin_are_the_organisations_activity(admin_client):
    member_key("acme", "alice", "admin")
    member_key("acme", "mo", "member")
    acme = Membership.objects.get(user__username="alice").tenant
    page = f"/admin/reservations/tenant/{acme.pk}/change/"
    shown = change_form(admin_client.get(page))
    users = {
        key.split("-")[1]: value
        for key, value in shown.items()
        if key.startswith("memberships-") and key.endswith("-user")
    }
    rows = {get_user_model().objects.get(pk=pk).username: row for row, pk in users.items()}
    assert admin_client.post(page, {**shown, f"memberships-{rows['mo']}-role": "viewer"}).status_code == 302
    # The last admin stays, here as through the API.
    refused = admin_client.post(page, {**shown, f"memberships-{rows['alice']}-DELETE": "on"}, follow=True)
    assert "Members not changed: an organisation keeps at least one admin" in refused.content.decode()
    assert Membership.objects.get(user__username="alice").role == "admin"

    changes = [(a.event, a.detail, a.user) for a in acme.activity.order_by("id")][-1:]
    assert changes == [("member_role_changed", {"member": "mo", "role": "viewer", "was": "member"}, "admin")]
    assert Membership.objects.get(user__username="mo").role == "viewer"
