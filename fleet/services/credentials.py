"""The agent credentials of a node's boots and tenancies (fleet/agent_credentials.py): minted with
the config drive that carries them, revoked when the boot or the tenancy ends (the drive goes with
them, its URL then 404), and checked on the node's reports.

A boot credential lives from the control plane's boot of the service image until its next boot or
power-off (workflows/node_workflows/booting.py); a tenancy credential from the tenant's drive until
the node stops serving that tenancy, or a reinstall gives it a new drive (fleet/services/transitions.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from fleet import agent_credentials, lifecycle
from fleet.leases import Lease, LeaseLost, fenced, record_discarded_result
from fleet.models import AuditEvent, AuditOnlyEvent, ConfigDrive, CredentialHolder, Node, NodeCredential
from fleet.services.transitions import audit_only

REFUSED_BY = "node agent"  # the audit's actor for a refused credential: whoever presented it
# A refused credential is audited once in this long, however often it is presented: the audit rows
# are kept for ever, and the refusals come before the reports' rate limit (authentication first).
REFUSAL_AUDITED_EVERY = timedelta(hours=1)


class CredentialRefused(Exception):
    """A report's token is no live credential of the node its route names."""


class NotServing(Exception):
    """A tenancy credential was asked for a node that serves no tenancy (any more)."""


def _mint(node: Node, holder: CredentialHolder, files: dict[str, str], reservation_id: int | None) -> ConfigDrive:
    nonce = agent_credentials.new_nonce()
    secret = agent_credentials.agent_secrets(settings.SECRET_KEY, node_id=node.pk, nonce=nonce)
    credential = NodeCredential.objects.create(
        node=node,
        holder=holder,
        reservation_id=reservation_id,
        nonce=nonce,
        report_token_sha256=agent_credentials.digest(secret.report_token),
    )
    return ConfigDrive.objects.create(node=node, credential=credential, token=secrets.token_urlsafe(32), files=files)


# The live boot credential ends, and its drive with it, in one statement.
REVOKE_BOOT = (
    f"WITH revoked AS (UPDATE {NodeCredential._meta.db_table} SET revoked_at = statement_timestamp()"
    f" WHERE node_id = %(node)s AND holder = '{CredentialHolder.BOOT.value}' AND revoked_at IS NULL RETURNING id)"
    f" DELETE FROM {ConfigDrive._meta.db_table} WHERE credential_id IN (SELECT id FROM revoked)"
)


def end_service_boot(*, node_id: int) -> None:
    """The service image's boot is over (the node boots again, or is powered off): its credential
    opens nothing any more."""
    with connection.cursor() as cursor:
        cursor.execute(REVOKE_BOOT, {"node": node_id})


def start_service_boot(*, lease: Lease, actor: str, files: dict[str, str]) -> str:
    """A new boot of the service image: the last boot's credential revoked, this one's minted with
    its drive (cloud-init's `files` and the credentials); returns the drive's token. LeaseLost,
    audited, if the worker's lease no longer holds: a stalled worker mints nothing."""
    with transaction.atomic():
        node = fenced(Node.objects.select_for_update().filter(pk=lease.node_id), lease).first()
        if node is None:
            record_discarded_result(lease=lease, attempted="a service boot's credential", actor=actor)
            raise LeaseLost(f"lease {lease.token} of {lease.owner} on node {lease.node_id} no longer holds")
        end_service_boot(node_id=node.pk)
        return _mint(node, CredentialHolder.BOOT, files, None).token


def tenancy_drive_token(*, node_id: int, files: Callable[[], dict[str, str]]) -> str:
    """The token of the URL of the tenancy's config drive, with its credential: made once per
    tenancy (a resumed provisioning finds it; a reinstall revoked the last one). NotServing if the
    node serves no tenancy: a worker whose lease ended with it gives the next tenant nothing."""
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.state not in lifecycle.SERVING_STATES or node.reservation_id is None:
            raise NotServing(f"{node.name} serves no tenancy")
        live = ConfigDrive.objects.filter(
            credential__node_id=node_id, credential__holder=CredentialHolder.TENANCY, credential__revoked_at=None
        ).first()
        if live is None:
            live = _mint(node, CredentialHolder.TENANCY, files(), node.reservation_id)
        return live.token


def authenticate_report(*, node_name: str, token: str) -> Node:
    """The node named `node_name`, if `token` is the report token of its live credential.
    CredentialRefused otherwise; audited on the credential's node when the token is one it was
    given (a revoked one, of an earlier boot or tenancy, or presented for another node), once an
    hour at most per credential."""
    credential = (
        NodeCredential.objects.select_related("node")
        .filter(report_token_sha256=agent_credentials.digest(token))
        .first()
    )
    if credential is None:
        raise CredentialRefused("no credential has this token")
    node = credential.node
    if credential.revoked_at is None and node.name == node_name:
        return node
    what = f"the report token of {credential.get_holder_display()} credential {credential.pk}"
    if credential.revoked_at is not None:
        why = f"{what}, revoked at {credential.revoked_at.isoformat()}"
    else:
        why = f"{what} of {node.name}, presented for {node_name}"
    if not _refusal_audited_lately(credential):
        _audit_refusal(credential, node_name, why)
    raise CredentialRefused(why)


def _refusal_audited_lately(credential: NodeCredential) -> bool:
    return AuditEvent.objects.filter(
        node_id=credential.node_id,
        event=AuditOnlyEvent.CREDENTIAL_REFUSED,
        detail__credential=credential.pk,
        at__gte=Now() - REFUSAL_AUDITED_EVERY,
    ).exists()


def _audit_refusal(credential: NodeCredential, node_name: str, why: str) -> None:
    detail = {
        "credential": credential.pk,
        "holder": credential.holder,
        "reservation": credential.reservation_id,
        "revoked_at": credential.revoked_at.isoformat() if credential.revoked_at else None,
        "presented_for": node_name,
    }
    audit_only(credential.node, AuditOnlyEvent.CREDENTIAL_REFUSED, actor=REFUSED_BY, reason=why, detail=detail).save()
