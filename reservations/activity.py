"""An organisation's activity log: one row per change to its keys, members, webhooks and SSH keys,
naming the person and the key of the request that made it (core.acting fills both in)."""

from __future__ import annotations

from reservations.models import Activity, ActivityKind, Tenant


def record(tenant: Tenant | int, kind: ActivityKind, **detail: object) -> Activity:
    """Written in the caller's transaction: the change and its row commit together, or neither."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    return Activity.objects.create(tenant_id=tenant_id, event=kind.value, detail=detail)
