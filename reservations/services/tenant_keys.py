"""A tenant's SSH public keys: kept checked, and forgotten."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Q

from core.errors import Conflict
from reservations import activity
from reservations import ssh_keys as keys
from reservations.models import ActivityKind, SSHKey, Tenant


class KeyRefused(Conflict):
    pass


def add_ssh_key(*, tenant: Tenant, name: str, public_key: str) -> SSHKey:
    """Keep one of the tenant's public keys; raises ssh_keys.BadKey for a malformed one and
    KeyRefused for a name or a key the tenant already has."""
    parsed = keys.parse(public_key)
    clash = SSHKey.objects.filter(tenant=tenant).filter(Q(name=name) | Q(fingerprint=parsed.fingerprint)).first()
    if clash is not None:
        raise KeyRefused(
            f"you have a key named {name!r} already"
            if clash.name == name
            else f"this key is yours already, named {clash.name!r}"
        )
    try:
        with transaction.atomic():
            key = SSHKey.objects.create(
                tenant=tenant, name=name, public_key=parsed.line, fingerprint=parsed.fingerprint
            )
            activity.record(tenant, ActivityKind.SSH_KEY_ADDED, ssh_key=key.pk, name=name, fingerprint=key.fingerprint)
            return key
    except IntegrityError as error:  # the same key or name added at the same moment
        raise KeyRefused("you added this key or this name a moment ago") from error


def delete_ssh_key(*, tenant: Tenant, key_id: int) -> bool:
    """Forget one of the tenant's keys; False if the tenant has no such key. Nodes that were given
    it keep it until their reservation ends."""
    with transaction.atomic():
        deleted, _ = SSHKey.objects.filter(pk=key_id, tenant=tenant).delete()
        if deleted:
            activity.record(tenant, ActivityKind.SSH_KEY_DELETED, ssh_key=key_id)
    return bool(deleted)
