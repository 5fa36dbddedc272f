"""Single sign-on: an OpenID provider's roles claim as organisations' memberships.

The provider says who someone is (`sub`) and, in the roles claim (settings.OIDC_ROLES_CLAIM,
`groups` by default), what they may do: entries `<organisation>:<role>`, as NVIDIA's NICo writes
them (`acme:admin`, `globex:VIEWER`). Each sign-in, and each silent one SessionRefresh makes, sets
the person's memberships to what the claim says: organisations that exist (a Tenant by name) with
the role named, the highest where one is named twice; memberships of organisations the claim no
longer names are removed (those an invitation made too), and entries naming no organisation or no
role are ignored. The entry settings.OIDC_OPERATOR_ROLE (`gpufleet:operator`) makes an operator
(staff and superuser, as `manage.py ensure_operator` makes them). Entries
settings.OIDC_ADMIN_GROUP_PREFIX + `<group>` (`gpufleet:group:auditors`) name the admin's Groups:
the person is a member of exactly those that exist (others are ignored), and staff where one does:
an operator to the pages, and in the admin allowed what those groups' permissions allow. Without
the operator entry or such a group they are neither staff nor superuser. standing_of reads the
memberships at every request, so the claim's change shows at the next request after the next
sign-in. The person is the Django user `oidc-<sub>` (the provider's subject, which, unlike an
email address, never changes nor passes to someone else); their email is kept up to date.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from reservations import access
from reservations.models import Membership, Tenant

USERNAME_PREFIX = "oidc-"
_USERNAME_LENGTH = 150  # Django's


def username_for(sub: str) -> str:
    """`oidc-<sub>`; a subject too long for a username (OpenID allows 255 characters) by its SHA-256."""
    username = f"{USERNAME_PREFIX}{sub}"
    if len(username) <= _USERNAME_LENGTH:
        return username
    return f"{USERNAME_PREFIX}sha256-{hashlib.sha256(sub.encode()).hexdigest()}"


@dataclass(frozen=True)
class Claimed:
    """What a roles claim grants: a role per organisation name, whether an operator, and the names
    of the admin's groups."""

    roles: dict[str, access.Role]
    operator: bool
    admin_groups: frozenset[str]


def read_roles_claim(entries: object, operator_entry: str, admin_group_prefix: str) -> Claimed:
    """The claim's entries (a list of strings, or one string of them separated by spaces or commas,
    as some providers send) read as the operator entry, `<admin_group_prefix><group>` (the prefix in
    any case, none when it is empty) or `<organisation>:<role>` (the role in any case); anything
    else is ignored."""
    if isinstance(entries, str):
        entries = entries.replace(",", " ").split()
    if not isinstance(entries, Iterable):
        return Claimed({}, operator=False, admin_groups=frozenset())
    roles: dict[str, access.Role] = {}
    operator = False
    admin_groups: set[str] = set()
    for entry in entries:
        if not isinstance(entry, str):
            continue
        entry = entry.strip()
        if entry.lower() == operator_entry.lower():
            operator = True
            continue
        # Before the organisations: `gpufleet:group:auditors` would read as organisation
        # `gpufleet:group`, role `auditors`.
        if admin_group_prefix and entry.lower().startswith(admin_group_prefix.lower()):
            if group := entry[len(admin_group_prefix) :]:
                admin_groups.add(group)
            continue
        organisation, colon, role_name = entry.rpartition(":")
        try:
            role = access.Role(role_name.lower())
        except ValueError:
            continue
        if not colon or not organisation:
            continue
        if organisation not in roles or role.rank > roles[organisation].rank:
            roles[organisation] = role
    return Claimed(roles, operator, frozenset(admin_groups))


def apply_claims(user, claims: dict) -> None:
    """Sets the user's memberships, operator flags, admin groups and email to what the claims say
    (see above)."""
    claimed = read_roles_claim(
        claims.get(settings.OIDC_ROLES_CLAIM, []), settings.OIDC_OPERATOR_ROLE, settings.OIDC_ADMIN_GROUP_PREFIX
    )
    with transaction.atomic():
        tenants = {t.name: t for t in Tenant.objects.filter(name__in=list(claimed.roles))}
        Membership.objects.filter(user=user).exclude(tenant__in=tenants.values()).delete()
        for name, tenant in tenants.items():
            Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": claimed.roles[name].value})
        admin_groups = list(Group.objects.filter(name__in=claimed.admin_groups))
        user.groups.set(admin_groups)
        staff = claimed.operator or bool(admin_groups)
        email = claims.get("email") if isinstance(claims.get("email"), str) else user.email
        changed = (user.is_staff, user.is_superuser, user.email) != (staff, claimed.operator, email)
        if changed:
            user.is_staff, user.is_superuser = staff, claimed.operator
            user.email = email or ""
            user.save(update_fields=["is_staff", "is_superuser", "email"])


class RolesClaimBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, matching people by `sub` and mapping their roles claim."""

    def get_userinfo(self, access_token, id_token, payload):
        """The userinfo endpoint's claims, with the verified ID token's over them: the roles claim
        is read from the ID token where the provider puts it there."""
        return {**super().get_userinfo(access_token, id_token, payload), **payload}

    def verify_claims(self, claims):
        return isinstance(claims.get("sub"), str) and bool(claims["sub"])

    def describe_user_by_claims(self, claims):
        return f"sub {claims.get('sub')}"

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(username=username_for(claims["sub"]))

    def create_user(self, claims):
        user = self.UserModel.objects.create_user(username_for(claims["sub"]))  # no usable password
        apply_claims(user, claims)
        return user

    def update_user(self, user, claims):
        apply_claims(user, claims)
        return user
