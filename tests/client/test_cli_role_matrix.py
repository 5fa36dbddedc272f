"""The CLI's role matrix: every command of `gpufleet`, read from its argparse parser, is run against
the live control plane by every kind of caller, and each is answered as the roles of
reservations.access say (tests/hostile_tenant/test_role_matrix.py does the same for the routes).

The table below says, per command, the route it calls and what that route does: a READ, a USE or
an ADMINISTER; or nothing, for a command that needs no key (it sends none). A command added
without an entry fails `test_every_command_has_an_entry`, and an entry whose action is not its
route's in the routes' matrix fails `test_each_command_needs_what_its_route_does`.

Callers, as in the routes' matrix: an admin's, a member's and a viewer's keys, an admin's
read-scope key, the organisation key; an expired, a revoked and a removed member's key; another
organisation's admin key; and no key at all. What each gets, by exit status (cli.EXIT_CODES) and
what stderr says:
- no key: 2, "no API key" and where to put one;
- an expired, revoked or removed member's key: 1, the server's reason with (401) and a word on
  the key;
- a role the table refuses: 1, the server's reason with (403), and the organisation as it was;
- another organisation: 3 with (404) on this organisation's object; its own answer (0, naming
  nothing of this organisation) where the command names no object;
- a role the table allows: 0.
A command that needs no key answers every caller alike, and as it answers one with no key.
A command that removes what it names (release, delete, revoke, remove) is given an object of the
organisation's own for each caller, so that every caller it allows finds one to remove.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from gpufleet_client.cli import build_parser

from attestation import ear
from attestation import services as attestation
from fleet.models import Node
from reservations import services as reservations
from reservations.access import Action
from reservations.models import Membership, Reservation, Webhook, WebhookDelivery
from reservations.models import Tenant as Organisation
from reservations.services import api_keys
from tests.client.conftest import Completed, Tenant, with_key
from tests.hostile_tenant.test_role_matrix import (
    ALLOWED,
    API,
    ORG,
    ROLES,
    UNAUTHENTICATED,
    matrix_keys,
    state_of,
)
from tests.support.factories import drive, signed_result

READ, USE, ADMINISTER = Action.READ, Action.USE, Action.ADMINISTER
HOOK = "http://127.0.0.1:9/hooks"  # loopback, allowed as a webhook's target here (WEBHOOK_ALLOWED_NETWORKS)
NO_KEY = "no key"
CALLERS = (*ROLES, *UNAUTHENTICATED, "other organisation", NO_KEY)


# -- the organisation every command is run on -------------------------------------------------


@dataclass
class World:
    organisation: Organisation
    callers: dict[str, Tenant]  # caller -> the CLI in its environment (its key in GPUFLEET_KEY)
    reservation: Reservation
    node: str  # a node serving the reservation, with a signed, affirming attestation result
    webhook: Webhook
    delivery: WebhookDelivery
    spare_member: Membership  # no caller's own: its role changed, signed out

    # A fresh object of the organisation's, for a command that removes what it names.

    def own_reservation(self) -> int:
        return reservations.create_reservation(tenant=self.organisation, node_count=1, actor=f"tenant:{ORG}").pk

    def own_webhook(self) -> int:
        return Webhook.objects.create(
            tenant=self.organisation, url=f"https://hooks.{ORG}.example/own", events=["reservation.active"]
        ).pk

    def own_key(self) -> int:
        admin = Membership.objects.get(tenant=self.organisation, user__username=f"{ORG}-admin").user
        return api_keys.issue_key(tenant=self.organisation, name=f"{ORG} own", created_by=admin).api_key.pk

    def own_member(self, caller: str) -> int:
        user = get_user_model().objects.create(username=f"{ORG}-{name(caller)}")
        return Membership.objects.create(tenant=self.organisation, user=user, role="viewer").pk


@pytest.fixture
def world(live_server, available_fleet, broker, settings, tmp_path) -> World:
    settings.WEBHOOK_ALLOWED_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)
    (tmp_path / "signing").mkdir()  # the control plane's result-signing key, a test key of its own
    ear.generate_signing_key(tmp_path / "signing" / "2026-11-29.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path / "signing")

    keys = matrix_keys()
    organisation = Organisation.objects.get(name=ORG)

    spare_user = get_user_model().objects.create(username=f"{ORG}-spare")
    spare_member = Membership.objects.create(tenant=organisation, user=spare_user, role="viewer")
    reservation = reservations.create_reservation(tenant=organisation, node_count=1, actor=f"tenant:{ORG}")
    node = drive(Node.objects.get(reservation=reservation), "provision_succeeded")
    (_kid, signing_key), *_older = attestation.signing_keys()
    signed_result(node, failures=(), key=signing_key)
    webhook = Webhook.objects.create(
        tenant=organisation, url=f"https://hooks.{ORG}.example/fleet", events=["reservation.active"]
    )
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, message_id="msg_matrix", event="reservation.active", payload={"type": "reservation.active"}
    )
    return World(
        organisation=organisation,
        callers={caller: with_key(tmp_path / name(caller), live_server.url, keys.get(caller)) for caller in CALLERS},
        reservation=reservation,
        node=node.name,
        webhook=webhook,
        delivery=delivery,
        spare_member=spare_member,
    )


def state(world: World) -> tuple:
    """What a refused command must leave as it was: the routes' matrix's, and who was signed out."""
    signed_out = Membership.objects.filter(tenant=world.organisation).values_list("pk", "signed_out_at")
    return state_of(world.organisation), sorted(signed_out)


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    calls: tuple[str, str]  # the method and route (as the URL patterns write it) the command calls
    needs: Action | None  # what the route does; None: the command needs no key, and sends none
    arguments: Callable[[World, str], list[str]] = lambda w, caller: []  # for this caller
    organisation_key_refused: bool = False


def name(caller: str) -> str:
    """A name for what the caller makes; without ORG in it, for another organisation's answer shows it."""
    return "matrix-" + caller.replace(" ", "-")


COMMANDS: dict[str, Command] = {
    "reserve": Command(("POST", "v1/reservations"), USE, lambda w, c: ["--nodes", "1"]),
    "list": Command(("GET", "v1/reservations"), READ),
    "show": Command(("GET", "v1/reservations/<int:pk>"), READ, lambda w, c: [str(w.reservation.pk)]),
    "extend": Command(("PATCH", "v1/reservations/<int:pk>"), USE, lambda w, c: [str(w.reservation.pk), "--nodes", "1"]),
    "release": Command(("POST", "v1/reservations/<int:pk>/release"), USE, lambda w, c: [str(w.own_reservation())]),
    "capacity": Command(("GET", "v1/capacity"), None),
    "quota": Command(("GET", "v1/quota"), READ),
    "usage": Command(("GET", "v1/usage"), READ),
    "webhooks": Command(("GET", "v1/webhooks"), READ),
    "webhooks add": Command(
        ("POST", "v1/webhooks"), ADMINISTER, lambda w, c: [f"{HOOK}/{name(c)}", "--event", "reservation.active"]
    ),
    "webhooks delete": Command(("DELETE", "v1/webhooks/<int:pk>"), ADMINISTER, lambda w, c: [str(w.own_webhook())]),
    "webhooks deliveries": Command(("GET", "v1/webhooks/<int:pk>/deliveries"), READ, lambda w, c: [str(w.webhook.pk)]),
    "webhooks redeliver": Command(
        ("POST", "v1/webhooks/<int:pk>/deliveries/<int:delivery>/redeliver"),
        ADMINISTER,
        lambda w, c: [str(w.webhook.pk), str(w.delivery.pk)],
    ),
    "keys": Command(("GET", "v1/keys"), READ),
    "keys list": Command(("GET", "v1/keys"), READ),
    "keys create": Command(("POST", "v1/keys"), ADMINISTER, lambda w, c: [name(c)], organisation_key_refused=True),
    "keys revoke": Command(("DELETE", "v1/keys/<int:pk>"), ADMINISTER, lambda w, c: [str(w.own_key())]),
    "members": Command(("GET", "v1/members"), READ),
    "members list": Command(("GET", "v1/members"), READ),
    "members invite": Command(("POST", "v1/invitations"), ADMINISTER, lambda w, c: [f"{name(c)}@example.com"]),
    "members remove": Command(("DELETE", "v1/members/<int:pk>"), ADMINISTER, lambda w, c: [str(w.own_member(c))]),
    "members role": Command(
        ("PATCH", "v1/members/<int:pk>"), ADMINISTER, lambda w, c: [str(w.spare_member.pk), "member"]
    ),
    "members sign-out": Command(
        ("DELETE", "v1/members/<int:pk>/sessions"), ADMINISTER, lambda w, c: [str(w.spare_member.pk)]
    ),
    "verify": Command(("GET", "v1/nodes/<slug:name>/attestation"), None, lambda w, c: [w.node]),
}


# -- the commands, read from the parser -------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command `gpufleet` runs: each sub-command with a handler, nested ones as "keys create"
    (a group that runs one alone, such as `keys`, is one too)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                if sub.get_default("handler") is not None:
                    yield " ".join((*words, word))
                yield from commands(sub, (*words, word))


def test_every_command_has_an_entry():
    assert sorted(commands(build_parser())) == sorted(COMMANDS)


def test_each_command_needs_what_its_route_does():
    """A keyed command's action is its route's in the routes' matrix; one needing no key calls a
    public route (none of the tenants')."""
    for command, entry in COMMANDS.items():
        method, route = entry.calls
        if entry.needs is None:
            assert route not in API, command
        else:
            assert (command, API[route].needs[method]) == (command, entry.needs)
            organisation_key_refused = method in API[route].organisation_key_refused
            assert (command, organisation_key_refused) == (command, entry.organisation_key_refused)


# -- running each command as each caller ------------------------------------------------------------


def described(completed: Completed) -> str:
    return f"exit {completed.returncode}, stderr {completed.stderr[:200]!r}"


def refused_with(completed: Completed, status: int, exit_status: int) -> bool:
    """Refused by the server with `status`: its reason on stderr's first line, nothing on stdout."""
    first_line = (completed.stderr.splitlines() or [""])[0]
    return (
        completed.returncode == exit_status
        and first_line.startswith("gpufleet: ")
        and first_line.endswith(f"({status})")
        and completed.stdout == ""
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_command_answers_each_caller_as_its_role_allows(world, command):
    entry = COMMANDS[command]
    argv = {caller: [*command.split(), *entry.arguments(world, caller)] for caller in CALLERS}
    wrong: list[str] = []

    def run(caller: str) -> Completed:
        return world.callers[caller].run(*argv[caller])

    if entry.needs is None:
        anonymous = run(NO_KEY)
        if anonymous.returncode != 0:
            wrong.append(f"{NO_KEY}: {described(anonymous)}, not 0")
        for caller in CALLERS:
            got = run(caller)
            if (got.returncode, got.stdout) != (anonymous.returncode, anonymous.stdout):
                wrong.append(f"{caller}: {described(got)}, not as {NO_KEY} is answered")
        assert not wrong, f"{command}:\n  " + "\n  ".join(wrong)
        return

    # Those refused first, and another organisation: the organisation is as it was after them.
    before = state(world)
    got = run(NO_KEY)
    if got.returncode != 2 or not got.stderr.startswith("gpufleet: no API key: set GPUFLEET_KEY"):
        wrong.append(f"{NO_KEY}: {described(got)}, not 2 and where to put one")
    for caller in UNAUTHENTICATED:
        got = run(caller)
        if not refused_with(got, 401, 1) or "the server did not accept the API key" not in got.stderr:
            wrong.append(f"{caller}: {described(got)}, not 1 (401)")
    refused = [
        c
        for c, role in ROLES.items()
        if role not in ALLOWED[entry.needs] or (c == "organisation key" and entry.organisation_key_refused)
    ]
    for caller in refused:
        got = run(caller)
        if not refused_with(got, 403, 1):
            wrong.append(f"{caller}: {described(got)}, not 1 (403): {entry.needs.value} refused")
    got = run("other organisation")
    if "<" in entry.calls[1]:
        if not refused_with(got, 404, 3):
            wrong.append(f"other organisation, on this one's object: {described(got)}, not 3 (404)")
    elif got.returncode != 0 or ORG in got.stdout + got.stderr:
        wrong.append(f"other organisation, on its own: {described(got)}, not 0 naming nothing of {ORG}")
    if state(world) != before:
        wrong.append("a refused caller or another organisation changed the organisation")

    for caller in [c for c in ROLES if c not in refused]:
        got = run(caller)
        if got.returncode != 0:
            wrong.append(f"{caller}: {described(got)}, but the role allows {entry.needs.value}")
    assert not wrong, f"{command}:\n  " + "\n  ".join(wrong)
