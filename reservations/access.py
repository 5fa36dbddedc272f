"""Who may do what in an organisation, and what an API key looks like. Pure: no Django.

An organisation (a tenant) has members, each with a role: a `viewer` reads, a `member` also
reserves, changes, releases and uses nodes, an `admin` also manages members, keys, webhooks and
SSH keys. An API key has a scope: a `read` key acts as a viewer whatever its maker's role; a
`read-write` key acts with its maker's role while the maker remains a member. An organisation key
(made by an admin, or by `manage.py create_tenant`) belongs to no person and outlives them all: it
acts as an admin, as the tokens from before organisations did, except that it makes no keys (a key
is made by someone accountable: reservations/api/organisation_views.py).

A key is `gf_<id>_<secret>`: the id is printed wherever the key is named (lists, audit rows), the
secret is 256 random bits. Only the SHA-256 of the whole key is stored: a key is as random as a
strong password is not, so a slow hash would add nothing but latency on every request (GitHub's
and Stripe's tokens are kept the same way). Keys from before organisations (DRF's 40-hex-digit
tokens) keep working: each was stored hashed, named `legacy-` and its first 8 digits.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets

KEY_PREFIX = "gf_"
_ID_LENGTH = 8  # hex digits: 4 billion ids, unique by a constraint (a clash is drawn again)
_KEY = re.compile(r"^gf_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
_LEGACY_KEY = re.compile(r"^[0-9a-f]{40}$")  # rest_framework.authtoken's
LEGACY_PREFIX = "legacy-"


class Role(enum.StrEnum):
    VIEWER = "viewer"
    MEMBER = "member"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


class Scope(enum.StrEnum):
    READ = "read"
    READ_WRITE = "read-write"


class Action(enum.StrEnum):
    """What a route does, as the role table reads it."""

    READ = "read"  # anything a GET answers
    USE = "use"  # reserve, change, release; power, console, reinstall, report a node
    ADMINISTER = "administer"  # members, invitations, keys, webhooks, SSH keys


_LEAST_ROLE = {Action.READ: Role.VIEWER, Action.USE: Role.MEMBER, Action.ADMINISTER: Role.ADMIN}


def allows(role: Role, action: Action) -> bool:
    return role.rank >= _LEAST_ROLE[action].rank


def key_role(*, scope: Scope, maker_role: Role | None, organisation_key: bool) -> Role | None:
    """The role a key acts with: None when it acts with none (its maker is no longer a member)."""
    role = Role.ADMIN if organisation_key else maker_role
    if role is None:
        return None
    return Role.VIEWER if scope is Scope.READ else role


def new_key() -> tuple[str, str]:
    """A new key and its prefix, the part that names it (`gf_` and its id)."""
    key_id = secrets.token_hex(_ID_LENGTH // 2)
    return f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}", f"{KEY_PREFIX}{key_id}"


def prefix_of(key: str) -> str | None:
    """The prefix a presented key claims, or None for what has no key's shape."""
    match = _KEY.match(key)
    return f"{KEY_PREFIX}{match.group(1)}" if match else None


def is_legacy_key(key: str) -> bool:
    """A token from before organisations: found by its digest (its prefix was never printed)."""
    return bool(_LEGACY_KEY.match(key))


def legacy_prefix(key: str) -> str:
    return f"{LEGACY_PREFIX}{key[:8]}"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def matches(key: str, stored_digest: str) -> bool:
    """Whether `key` is the one stored, compared in constant time."""
    return hmac.compare_digest(digest(key), stored_digest)
