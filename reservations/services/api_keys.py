"""Organisations' API keys: issued (the key returned once, its digest kept), looked up when presented,
revoked. reservations.access says what a key looks like and what it may do."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now

from core import clock
from core.errors import Conflict, FieldRefused
from reservations import access, activity
from reservations.models import ActivityKind, ApiKey, Membership, Tenant

MAX_LIVE_KEYS = 100  # per organisation: a leak of keys is a leak of access, and lists stay short
LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often: not a write per request


class KeyLimitReached(Conflict):
    pass


@dataclass(frozen=True)
class Issued:
    key: str  # shown once, to whoever asked for it; never stored, never printed again
    api_key: ApiKey


@dataclass(frozen=True)
class Caller:
    """Who a presented key acts for: its organisation, the user behind it (the person who made it,
    or for an organisation key the organisation's own account), the role it acts with, and the key."""

    tenant: Tenant
    user: User
    role: access.Role
    api_key: ApiKey
    # The database's clock, read with the key: the request's now, where a service takes one (a
    # create decides its period and placement at it) without a round trip of its own.
    read_at: datetime


class KeyNotAccepted(Exception):
    """The presented key is no key, revoked, expired, or acts for no one any more: `reason` says
    which (an HTTP API answers 401 with it)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def issue_key(
    *,
    tenant: Tenant,
    name: str,
    scope: access.Scope = access.Scope.READ_WRITE,
    expires_at: datetime | None = None,
    created_by: User | None = None,
    organisation_key: bool = False,
) -> Issued:
    """A new key of the organisation. A member's key needs its maker (`created_by`); an
    organisation key may have none (manage.py create_tenant makes one)."""
    if expires_at is not None and expires_at <= clock.now():
        raise FieldRefused("expires_at", "must be in the future")
    if not organisation_key and created_by is None:
        raise FieldRefused("organisation_key", "a key made by no member must be the organisation's")
    with transaction.atomic():
        if organisation_key:
            organisation_account(tenant)
        # The count and the insert under the organisation's lock: two requests cannot both take the last place.
        Tenant.objects.select_for_update().filter(pk=tenant.pk).exists()
        if live_keys(tenant).count() >= MAX_LIVE_KEYS:
            raise KeyLimitReached(f"an organisation has at most {MAX_LIVE_KEYS} live keys: revoke one first")
        for _attempt in range(3):  # a prefix drawn twice: 4 billion ids, so almost never
            key, prefix = access.new_key()
            try:
                with transaction.atomic():
                    api_key = ApiKey.objects.create(
                        tenant=tenant,
                        name=name,
                        scope=scope.value,
                        prefix=prefix,
                        digest=access.digest(key),
                        organisation_key=organisation_key,
                        created_by=created_by,
                        expires_at=expires_at,
                    )
            except IntegrityError:
                continue
            activity.record(
                tenant,
                ActivityKind.KEY_CREATED,
                prefix=prefix,
                name=name,
                scope=scope.value,
                organisation=organisation_key,
            )
            return Issued(key=key, api_key=api_key)
    raise Conflict("could not draw a free key id: try again")


def organisation_account(tenant: Tenant) -> User:
    """The organisation's own user, which its organisation keys act as: made when first needed."""
    if tenant.user is None:
        tenant.user, _ = get_user_model().objects.get_or_create(username=f"tenant-{tenant.name}")
        tenant.save(update_fields=["user"])
    return tenant.user


def live_keys(tenant: Tenant):
    """The organisation's keys that are not revoked (expired ones included: they are listed until revoked)."""
    return ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True)


def revoke_key(*, tenant: Tenant, key_id: int) -> bool:
    """Revoke one of the organisation's keys; False if it has no such live key."""
    return bool(revoke_keys(ApiKey.objects.filter(tenant=tenant, pk=key_id)))


def revoke_all_keys(tenants) -> int:
    """Revoke every live key of these organisations (the operators' admin action); how many."""
    return revoke_keys(ApiKey.objects.filter(tenant__in=tenants))


def revoke_keys(keys) -> int:
    """Revoke these keys (a queryset of ApiKey), those not revoked yet; how many were."""
    with transaction.atomic():
        revoking = list(
            keys.filter(revoked_at__isnull=True).select_for_update().values_list("pk", "tenant_id", "prefix")
        )
        ApiKey.objects.filter(pk__in=[pk for pk, _tenant, _prefix in revoking]).update(revoked_at=Now())
        for _pk, tenant_id, prefix in revoking:
            activity.record(tenant_id, ActivityKind.KEY_REVOKED, prefix=prefix)
    return len(revoking)


def accept_key(presented: str) -> Caller:
    """The caller a presented key acts for, or KeyNotAccepted. A key of today's shape is found by its
    prefix and compared in constant time; a token from before organisations, by its digest."""
    # The database's time with the key, in the same query (core.clock would cost one more per request).
    # Its organisation's quota with it, for a create (reservations.selectors.tenant_quota).
    keys = ApiKey.objects.select_related("tenant__user", "tenant__quota", "created_by").annotate(db_now=Now())
    if prefix := access.prefix_of(presented):
        api_key = keys.filter(prefix=prefix).first()
        if api_key is not None and not access.matches(presented, api_key.digest):
            api_key = None
    elif access.is_legacy_key(presented):
        api_key = keys.filter(digest=access.digest(presented), prefix__startswith=access.LEGACY_PREFIX).first()
    else:
        api_key = None
    if api_key is None:
        raise KeyNotAccepted("invalid key")
    if api_key.revoked_at is not None:
        raise KeyNotAccepted("this key was revoked")
    now = api_key.db_now
    if api_key.expires_at is not None and api_key.expires_at <= now:
        raise KeyNotAccepted("this key has expired")
    caller = _caller(api_key, now)
    if caller is None:
        raise KeyNotAccepted("this key's maker is no longer a member of its organisation")
    if api_key.last_used_at is None or api_key.last_used_at < now - LAST_USED_EVERY:
        # Compare-and-set: of concurrent requests, one writes.
        stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)
        ApiKey.objects.filter(stale, pk=api_key.pk).update(last_used_at=now)
    return caller


def _caller(api_key: ApiKey, read_at: datetime) -> Caller | None:
    tenant = api_key.tenant
    maker_role = None
    if not api_key.organisation_key and api_key.created_by is not None:
        role = Membership.objects.filter(tenant=tenant, user=api_key.created_by).values_list("role", flat=True).first()
        maker_role = access.Role(role) if role else None
    role = access.key_role(
        scope=access.Scope(api_key.scope), maker_role=maker_role, organisation_key=api_key.organisation_key
    )
    if role is None:
        return None
    user = tenant.user if api_key.organisation_key else api_key.created_by
    if user is None or not user.is_active:
        return None
    return Caller(tenant=tenant, user=user, role=role, api_key=api_key, read_at=read_at)
