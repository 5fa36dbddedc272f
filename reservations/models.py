"""Tenants and their reservations. Placement and the API arrive with the reservations issue;
the models exist now because a node's tenant and reservation constraints bind already."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now


class ReservationState(models.TextChoices):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    DEGRADED = "degraded"
    RELEASING = "releasing"
    RELEASED = "released"
    FAILED = "failed"


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Reservation(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="reservations")
    state = models.CharField(max_length=16, choices=ReservationState.choices, default=ReservationState.PENDING)
    node_count = models.PositiveIntegerField()
    pod = models.ForeignKey("fleet.Pod", null=True, blank=True, on_delete=models.PROTECT)
    rack_scale = models.BooleanField(default=False)
    starts_at = models.DateTimeField(db_default=Now())
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: open-ended.")
    reason = models.TextField(blank=True, help_text="Why it failed or is degraded.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(node_count__gte=1), name="reservation_at_least_one_node"),
            models.CheckConstraint(condition=Q(state__in=ReservationState.values), name="reservation_state_known"),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=F("starts_at")), name="reservation_ends_after_start"
            ),
            models.CheckConstraint(
                condition=~Q(state=ReservationState.FAILED) | ~Q(reason=""), name="reservation_failed_has_reason"
            ),
        ]

    def __str__(self):
        return f"reservation {self.pk} ({self.tenant_id})"
