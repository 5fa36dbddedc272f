"""The role matrix: every route of the tenants' API on the private listener (each view whose
permission is IsTenant) and every tenant page (each TenantPage), read from the URL patterns, is
called by every kind of caller, and each answers as the roles of reservations.access say it should.

The table below says, per route and method, what the route does: a READ, a USE (reserve, change,
release, act on nodes) or an ADMINISTER (members, invitations, keys, webhooks, SSH keys). A route
added without an entry fails `test_every_route_has_an_entry`; an entry whose route went fails too.

Callers: an admin's, a member's and a viewer's keys; an admin's read-scope key (a viewer's
rights); the organisation key (an admin's, but it makes no keys); an expired, a revoked and a
removed member's key (401, whatever the route); and another organisation's admin key, on this
organisation's objects (404 where the route names one; its own data where it does not). A caller
the role table refuses gets 403, and nothing it sent changes the organisation; a caller it allows
gets past the permission check: any answer but 401 or 403 (the body sent is minimal: a 400, 404
or 409 still says the permission passed), and never a 500.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from console.pages.views import TenantPage
from fleet.models import AuditEvent, Node, PowerAction
from reservations import access
from reservations import services as reservations
from reservations.access import Action
from reservations.api.views import IsTenant
from reservations.models import (
    ApiKey,
    Invitation,
    Membership,
    Reservation,
    SSHKey,
    Tenant,
    Webhook,
    WebhookDelivery,
)
from reservations.services import api_keys
from tests.support.api import key_client, member_key
from tests.support.factories import drive, tenant_token

pytestmark = pytest.mark.django_db

READ, USE, ADMINISTER = Action.READ, Action.USE, Action.ADMINISTER
ORG = "acmecorp"  # in every name of the organisation's: another organisation's answers must not carry it
OTHER = "globex"
PRIVATE_LISTENER = "gpufleet.urls"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdPNlSYmCGJxnLpo8YQaeR8TcqIC3qVc4sUVBn2jGqP matrix@laptop"


# -- the organisation every route is called on ------------------------------------------------


@dataclass
class World:
    tenant: Tenant
    keys: dict[str, str]  # caller -> the key it presents
    reservation: Reservation
    node: str  # a node serving the reservation (active)
    webhook: Webhook
    delivery: WebhookDelivery
    ssh_key: SSHKey
    spare_member: Membership  # changed and removed by the member routes: no caller's own
    spare_key: ApiKey  # revoked by DELETE /v1/keys/<pk>: no caller's own
    users: dict[str, Any] = field(default_factory=dict)  # page caller -> the user signed in


class FakeBMC:
    """The console route's BMC: a node's console log without a Redfish server."""

    def console_log(self, lines, since=None):
        return ["matrix: console line"]

    def close(self):
        pass


def matrix_keys() -> dict[str, str]:
    """A key for each caller the matrices try (the routes' here, the CLI's in
    tests/client/test_cli_role_matrix.py), the organisation made as an operator makes it: the
    expired one expired, the revoked one revoked, the removed member gone."""
    organisation_key = tenant_token(ORG)
    tenant = Tenant.objects.get(name=ORG)
    keys = {
        "admin": member_key(ORG, f"{ORG}-admin", "admin"),
        "member": member_key(ORG, f"{ORG}-member", "member"),
        "viewer": member_key(ORG, f"{ORG}-viewer", "viewer"),
        "admin read-scope": member_key(ORG, f"{ORG}-admin", "admin", scope="read"),
        "organisation key": organisation_key,
        "expired": member_key(ORG, f"{ORG}-member", "member"),
        "revoked": member_key(ORG, f"{ORG}-admin", "admin"),
        "removed member": member_key(ORG, "leaver", "admin"),
        "other organisation": member_key(OTHER, f"{OTHER}-admin", "admin"),
    }
    expired = ApiKey.objects.get(prefix=access.prefix_of(keys["expired"]))
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=F("created_at") + timedelta(microseconds=1))
    assert api_keys.revoke_key(tenant=tenant, key_id=ApiKey.objects.get(prefix=access.prefix_of(keys["revoked"])).pk)
    Membership.objects.filter(tenant=tenant, user__username="leaver").delete()
    return keys


@pytest.fixture
def world(available_fleet, monkeypatch) -> World:
    monkeypatch.setattr("workflows.api.views.bmc_client", lambda node: FakeBMC())
    keys = matrix_keys()
    tenant = Tenant.objects.get(name=ORG)

    users = get_user_model().objects
    spare_user = users.create(username=f"{ORG}-spare")
    spare_member = Membership.objects.create(tenant=tenant, user=spare_user, role="viewer")
    spare_key = api_keys.issue_key(tenant=tenant, name=f"{ORG} spare", created_by=users.get(username=f"{ORG}-admin"))

    reservation = reservations.create_reservation(tenant=tenant, node_count=1, actor=f"tenant:{ORG}")
    node = drive(Node.objects.get(reservation=reservation), "provision_succeeded")
    webhook = Webhook.objects.create(
        tenant=tenant, url=f"https://hooks.{ORG}.example/fleet", events=["reservation.active"], secret="whsec_matrix"
    )
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, message_id="msg_matrix", event="reservation.active", payload={"type": "reservation.active"}
    )
    ssh_key = SSHKey.objects.create(
        tenant=tenant, name=f"{ORG}-laptop", public_key=SSH_KEY, fingerprint="SHA256:matrix"
    )
    return World(
        tenant=tenant,
        keys=keys,
        reservation=reservation,
        node=node.name,
        webhook=webhook,
        delivery=delivery,
        ssh_key=ssh_key,
        spare_member=spare_member,
        spare_key=spare_key.api_key,
        users={
            "admin": users.get(username=f"{ORG}-admin"),
            "member": users.get(username=f"{ORG}-member"),
            "viewer": users.get(username=f"{ORG}-viewer"),
            "organisation account": tenant.user,
            "removed member": users.get(username="leaver"),
            "other organisation": users.get(username=f"{OTHER}-admin"),
        },
    )


def state_of(tenant: Tenant) -> tuple:
    """What a refused request must leave as it was: the organisation's objects and what was done to its nodes."""
    return (
        list(Reservation.objects.filter(tenant=tenant).values_list("pk", "state", "node_count", "ends_at")),
        list(Node.objects.filter(reservation__tenant=tenant).values_list("pk", "state", "reservation_id")),
        PowerAction.objects.filter(node__reservation__tenant=tenant).count(),
        AuditEvent.objects.filter(actor__startswith=f"tenant:{tenant.name}").count(),
        list(Webhook.objects.filter(tenant=tenant).values_list("pk", "url")),
        list(
            WebhookDelivery.objects.filter(webhook__tenant=tenant).values_list("pk", "state", "attempts", "last_error")
        ),
        list(SSHKey.objects.filter(tenant=tenant).values_list("pk", "name")),
        list(ApiKey.objects.filter(tenant=tenant).values_list("pk", "revoked_at", "scope")),
        list(Membership.objects.filter(tenant=tenant).values_list("pk", "role")),
        Invitation.objects.filter(tenant=tenant).count(),
    )


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: Callable[[World], str]  # the route, on the organisation's own objects
    needs: dict[str, Action]  # method -> what it does
    body: dict[str, dict] = field(default_factory=dict)  # method -> a minimal body
    # Another organisation's read of a route that names no object: its own data, checked beyond
    # "no name of the organisation in it" (for rows that carry no name, such as a reservation's).
    foreign_read: Callable[[dict], bool] | None = None
    organisation_key_refused: frozenset[str] = frozenset()  # methods an organisation key may not call


def no_results(answer: dict) -> bool:
    return answer["results"] == []


def none_of_its_activity(answer: dict) -> bool:
    organisations = apps.get_model("reservations", "Activity").objects.filter(
        pk__in=[r["id"] for r in answer["results"]]
    )
    return not organisations.filter(tenant__name=ORG).exists()


def _node(route: str) -> Callable[[World], str]:
    return lambda w: f"/v1/reservations/{w.reservation.pk}/nodes/{w.node}/{route}"


API: dict[str, Entry] = {
    "v1/reservations": Entry(
        lambda w: "/v1/reservations",
        {"GET": READ, "POST": USE},
        {"POST": {"node_count": 1}},
        foreign_read=no_results,
    ),
    "v1/reservations/<int:pk>": Entry(
        lambda w: f"/v1/reservations/{w.reservation.pk}",
        {"GET": READ, "PATCH": USE},
        {"PATCH": {"node_count": 1}},
    ),
    "v1/reservations/<int:pk>/release": Entry(lambda w: f"/v1/reservations/{w.reservation.pk}/release", {"POST": USE}),
    "v1/reservations/<int:pk>/nodes/<slug:name>/report": Entry(
        _node("report"), {"POST": USE}, {"POST": {"description": "matrix: it is broken"}}
    ),
    "v1/reservations/<int:pk>/nodes/<slug:name>/reboot": Entry(_node("reboot"), {"POST": USE}),
    "v1/reservations/<int:pk>/nodes/<slug:name>/power-cycle": Entry(_node("power-cycle"), {"POST": USE}),
    "v1/reservations/<int:pk>/nodes/<slug:name>/reinstall": Entry(_node("reinstall"), {"POST": USE}, {"POST": {}}),
    "v1/reservations/<int:pk>/nodes/<slug:name>/console": Entry(_node("console"), {"GET": READ}),
    "v1/quota": Entry(lambda w: "/v1/quota", {"GET": READ}, foreign_read=lambda a: not any(a["used"].values())),
    "v1/usage": Entry(lambda w: "/v1/usage", {"GET": READ}, foreign_read=no_results),
    "v1/ssh-keys": Entry(
        lambda w: "/v1/ssh-keys",
        {"GET": READ, "POST": ADMINISTER},
        {"POST": {"name": "matrix", "public_key": SSH_KEY}},
        foreign_read=no_results,
    ),
    "v1/ssh-keys/<int:pk>": Entry(lambda w: f"/v1/ssh-keys/{w.ssh_key.pk}", {"DELETE": ADMINISTER}),
    "v1/webhooks": Entry(
        lambda w: "/v1/webhooks",
        {"GET": READ, "POST": ADMINISTER},
        # An address literal: nothing is resolved (whether it is let through or refused, 201 or 400).
        {"POST": {"url": "http://192.0.2.1/hook", "events": ["reservation.active"]}},
        foreign_read=no_results,
    ),
    "v1/webhooks/<int:pk>": Entry(lambda w: f"/v1/webhooks/{w.webhook.pk}", {"DELETE": ADMINISTER}),
    "v1/webhooks/<int:pk>/deliveries": Entry(lambda w: f"/v1/webhooks/{w.webhook.pk}/deliveries", {"GET": READ}),
    "v1/webhooks/<int:pk>/deliveries/<int:delivery>/redeliver": Entry(
        lambda w: f"/v1/webhooks/{w.webhook.pk}/deliveries/{w.delivery.pk}/redeliver", {"POST": ADMINISTER}
    ),
    "v1/keys": Entry(
        lambda w: "/v1/keys",
        {"GET": READ, "POST": ADMINISTER},
        {"POST": {"name": "matrix"}},
        foreign_read=lambda a: {k["created_by"] for k in a["results"]} <= {f"{OTHER}-admin"},
        organisation_key_refused=frozenset({"POST"}),
    ),
    "v1/keys/<int:pk>": Entry(lambda w: f"/v1/keys/{w.spare_key.pk}", {"DELETE": ADMINISTER}),
    "v1/members": Entry(
        lambda w: "/v1/members",
        {"GET": READ},
        foreign_read=lambda a: [m["username"] for m in a["results"]] == [f"{OTHER}-admin"],
    ),
    "v1/members/<int:pk>": Entry(
        lambda w: f"/v1/members/{w.spare_member.pk}",
        {"PATCH": ADMINISTER, "DELETE": ADMINISTER},
        {"PATCH": {"role": "member"}},
    ),
    "v1/members/<int:pk>/sessions": Entry(
        lambda w: f"/v1/members/{w.spare_member.pk}/sessions", {"DELETE": ADMINISTER}
    ),
    "v1/invitations": Entry(
        lambda w: "/v1/invitations", {"POST": ADMINISTER}, {"POST": {"email": "matrix@example.com"}}
    ),
    "v1/activity": Entry(lambda w: "/v1/activity", {"GET": READ}, foreign_read=none_of_its_activity),
}

PAGES: dict[str, Entry] = {
    "my/reservations": Entry(lambda w: "/my/reservations", {"GET": READ, "POST": USE}, {"POST": {"node_count": 1}}),
    "my/reservations/<int:pk>/extend": Entry(
        lambda w: f"/my/reservations/{w.reservation.pk}/extend", {"POST": USE}, {"POST": {}}
    ),
    "my/reservations/<int:pk>/node-count": Entry(
        lambda w: f"/my/reservations/{w.reservation.pk}/node-count", {"POST": USE}, {"POST": {"node_count": 1}}
    ),
    "my/reservations/<int:pk>/release": Entry(lambda w: f"/my/reservations/{w.reservation.pk}/release", {"POST": USE}),
    "my/webhooks/<int:webhook>/deliveries/<int:delivery>/redeliver": Entry(
        lambda w: f"/my/webhooks/{w.webhook.pk}/deliveries/{w.delivery.pk}/redeliver", {"POST": ADMINISTER}
    ),
}

# Under the tenants' prefixes, every route is a tenant's (IsTenant, or a TenantPage): a route
# there that is neither forgot its permission. The exceptions, each a login's own:
TENANT_PREFIXES = (
    "v1/reservations",
    "v1/quota",
    "v1/usage",
    "v1/ssh-keys",
    "v1/webhooks",
    "v1/keys",
    "v1/members",
    "v1/invitations",
    "v1/activity",
    "my/",
)
NOT_TENANT_ROUTES = {"my/organisation"}  # picks among the signed-in user's own organisations


# -- the routes, read from the URL patterns -------------------------------------------------------


def walk(patterns, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), getattr(pattern.callback, "view_class", None)


def _has_is_tenant(permission) -> bool:
    """IsTenant or a subclass, alone or in DRF's composition (IsTenant & Other, ~IsTenant ...)."""
    if isinstance(permission, type):
        return issubclass(permission, IsTenant)
    return any(_has_is_tenant(getattr(permission, side, None)) for side in ("op1_class", "op2_class"))


def is_api_route(view_class) -> bool:
    return any(_has_is_tenant(p) for p in getattr(view_class, "permission_classes", None) or ())


def is_page_route(view_class) -> bool:
    return isinstance(view_class, type) and issubclass(view_class, TenantPage)


def methods_of(view_class) -> set[str]:
    named = getattr(view_class, "http_method_names", ())
    return {m.upper() for m in named if m not in ("head", "options", "trace") and hasattr(view_class, m)}


def routes() -> tuple[dict[str, set[str]], dict[str, set[str]], list[str]]:
    """The private listener's API routes and pages, each with its methods; and the routes under
    a tenant's prefix that are neither."""
    api: dict[str, set[str]] = {}
    pages: dict[str, set[str]] = {}
    neither = []
    for route, view_class in walk(get_resolver(PRIVATE_LISTENER).url_patterns):
        if is_api_route(view_class):
            api[route] = methods_of(view_class)
        elif is_page_route(view_class):
            pages[route] = methods_of(view_class)
        elif route.startswith(TENANT_PREFIXES) and route not in NOT_TENANT_ROUTES:
            neither.append(route)
    return api, pages, neither


def test_every_route_has_an_entry():
    api, pages, neither = routes()
    assert api and pages
    assert {r: sorted(m) for r, m in api.items()} == {r: sorted(e.needs) for r, e in API.items()}
    assert {r: sorted(m) for r, m in pages.items()} == {r: sorted(e.needs) for r, e in PAGES.items()}
    assert neither == [], "tenant routes without IsTenant or TenantPage"
    for route, entry in API.items():  # a read of another organisation's: its own data
        if "GET" in entry.needs and "<" not in route:
            assert entry.foreign_read is not None, route


def test_the_table_agrees_with_the_views_declarations():
    """`administers` is what turns a write into an ADMINISTER: the table and the views say the same."""
    for route, view_class in walk(get_resolver(PRIVATE_LISTENER).url_patterns):
        table = API.get(route) or PAGES.get(route)
        if table is None:
            continue
        for method, action in table.needs.items():
            administers = getattr(view_class, "administers", False)
            declared = READ if method not in WRITES else (ADMINISTER if administers else USE)
            assert (route, method, action) == (route, method, declared)


# -- calling each route as each caller ----------------------------------------------------------


def cases(table: dict[str, Entry]) -> list:
    return [
        pytest.param(route, method, id=f"{method} {route}") for route, entry in table.items() for method in entry.needs
    ]


API_CASES = cases(API)
PAGE_CASES = cases(PAGES)

# Who may do what, written out here rather than asked of reservations.access: the matrix checks
# access.allows too, so it must not take its expectations from it.
ALLOWED = {READ: {"viewer", "member", "admin"}, USE: {"member", "admin"}, ADMINISTER: {"admin"}}
ROLES = {  # API caller -> the role it acts with
    "admin": "admin",
    "member": "member",
    "viewer": "viewer",
    "admin read-scope": "viewer",
    "organisation key": "admin",
}
PAGE_ROLES = {  # signed-in user -> the role the page acts with
    "admin": "admin",
    "member": "member",
    "viewer": "viewer",
    "organisation account": "admin",  # the organisation's own user: its admin
}
UNAUTHENTICATED = ("expired", "revoked", "removed member")


def call(client, method: str, path: str, body: dict | None, *, as_json: bool):
    client.raise_request_exception = False  # a 500 is an answer to report, not the test's error
    if method == "GET":
        return client.get(path)
    if as_json:
        return client.generic(method, path, json.dumps(body or {}), content_type="application/json")
    return client.post(path, body or {})


def allowed_answers(answer: Callable[[str], Any], callers: list[str], action: Action) -> list[str]:
    """What is wrong with the answers to the callers the role table allows: each past the permission
    check, and each answered as the others (each on the organisation as it was: its request undone)."""
    wrong, statuses = [], {}
    for caller in callers:
        with transaction.atomic():
            got = answer(caller)
            transaction.set_rollback(True)
        statuses[caller] = got.status_code
        if got.status_code in (401, 403) or got.status_code >= 500:
            wrong.append(f"{caller}: {described(got)}, but the role allows {action.value}")
    if len(set(statuses.values())) > 1:
        wrong.append(f"the callers allowed are answered differently: {statuses}")
    return wrong


def others_answer(got, *, names_an_object: bool, read_for_names: bool) -> list[str]:
    """What is wrong with another organisation's answer: a 404 for this one's object; else its own
    answer, neither refused nor failed, and (where `read_for_names`) naming nothing of this one."""
    if names_an_object:
        found_it = got.status_code != 404
        return [f"other organisation, on this one's object: {described(got)}, not 404"] if found_it else []
    if got.status_code in (401, 403) or got.status_code >= 500:
        return [f"other organisation, on its own: {described(got)}"]
    if read_for_names and ORG in got.content.decode(errors="replace"):
        return [f"other organisation: its answer names {ORG}: {described(got)}"]
    return []


def described(answer) -> str:
    text = answer.content.decode(errors="replace")
    return f"{answer.status_code} {text[:200]!r}"


@pytest.mark.parametrize(("route", "method"), API_CASES)
def test_api_route_answers_each_caller_as_its_role_allows(world, route, method):
    entry = API[route]
    path, action, body = entry.path(world), entry.needs[method], entry.body.get(method)
    names_an_object = "<" in route
    wrong: list[str] = []

    def answer(caller: str):
        return call(key_client(world.keys[caller]), method, path, body, as_json=True)

    # Those refused first, and another organisation: the organisation is as it was after them.
    before = state_of(world.tenant)
    for caller in UNAUTHENTICATED:
        got = answer(caller)
        if got.status_code != 401:
            wrong.append(f"{caller}: {described(got)}, not 401")
    refused = [
        c
        for c, role in ROLES.items()
        if role not in ALLOWED[action] or (c == "organisation key" and method in entry.organisation_key_refused)
    ]
    for caller in refused:
        got = answer(caller)
        if got.status_code != 403:
            wrong.append(f"{caller}: {described(got)}, not 403 ({action.value} refused)")
    got = answer("other organisation")
    if foreign := others_answer(got, names_an_object=names_an_object, read_for_names=True):
        wrong += foreign
    elif method == "GET" and entry.foreign_read is not None and not entry.foreign_read(got.json()):
        wrong.append(f"other organisation: not its own data: {described(got)}")
    if state_of(world.tenant) != before:
        wrong.append("a refused caller or another organisation changed the organisation")

    wrong += allowed_answers(answer, [c for c in ROLES if c not in refused], action)
    assert not wrong, f"{method} {route}:\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize(("route", "method"), PAGE_CASES)
def test_page_answers_each_signed_in_member_as_their_role_allows(world, route, method):
    entry = PAGES[route]
    path, action, body = entry.path(world), entry.needs[method], entry.body.get(method)
    names_an_object = "<" in route
    wrong: list[str] = []

    def answer(caller: str | None):
        browser = Client()
        if caller is not None:
            browser.force_login(world.users[caller])
        return call(browser, method, path, body, as_json=False)

    before = state_of(world.tenant)
    got = answer(None)
    if got.status_code != 302 or not got["Location"].startswith("/accounts/login/"):
        wrong.append(f"anonymous: {described(got)}, not sent to sign in")
    refused = [c for c, role in PAGE_ROLES.items() if role not in ALLOWED[action]]
    if method != "GET":
        refused.append("removed member")  # a member no more: no organisation to act for
    for caller in refused:
        got = answer(caller)
        if got.status_code != 403:
            wrong.append(f"{caller}: {described(got)}, not 403 ({action.value} refused)")
    if method == "GET":
        got = answer("removed member")
        if got.status_code != 200 or ORG in got.content.decode():
            wrong.append(f"removed member: {described(got)}, not a page naming nothing of {ORG}")
    got = answer("other organisation")
    wrong += others_answer(got, names_an_object=names_an_object, read_for_names=method == "GET")
    if state_of(world.tenant) != before:
        wrong.append("a refused caller or another organisation changed the organisation")

    wrong += allowed_answers(answer, [c for c in PAGE_ROLES if c not in refused], action)
    assert not wrong, f"{method} {route}:\n  " + "\n  ".join(wrong)
