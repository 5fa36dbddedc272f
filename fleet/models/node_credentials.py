"""The agent credentials a node's OS is given, one per holder and period (fleet/agent_credentials.py)."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from fleet.models.nodes import Node


class CredentialHolder(models.TextChoices):
    """Who holds a credential: the service image for one boot, or a tenant for its tenancy."""

    BOOT = "boot", "service image boot"
    TENANCY = "tenancy"


class NodeCredential(models.Model):
    """One boot's or one tenancy's agent credentials, revoked when the boot or the tenancy ends
    (fleet/services/credentials.py). The row holds no secret: the nonce derives them only with the
    control plane's key, and the report token is kept as its SHA-256."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="credentials")
    holder = models.CharField(max_length=16, choices=CredentialHolder.choices)
    reservation = models.ForeignKey(
        "reservations.Reservation", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    nonce = models.CharField(max_length=64, help_text="With the control plane's key, derives the secrets.")
    report_token_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(holder__in=CredentialHolder.values), name="node_credential_holder_known"
            ),
            models.UniqueConstraint(
                fields=["node", "holder"],
                condition=Q(revoked_at__isnull=True),
                name="node_credential_one_live_per_holder",
            ),
            models.CheckConstraint(
                condition=Q(holder=CredentialHolder.TENANCY, reservation__isnull=False)
                | Q(holder=CredentialHolder.BOOT, reservation__isnull=True),
                name="node_credential_tenancy_has_its_reservation",
            ),
            models.CheckConstraint(
                condition=Q(revoked_at__isnull=True) | Q(revoked_at__gte=F("created_at")),
                name="node_credential_revoked_after_created",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_holder_display()} credential {self.pk} of node {self.node_id}"
