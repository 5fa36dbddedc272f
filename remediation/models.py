"""Every alert the control plane received, what it did about it, and the incident's timeline."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class RemediationStatus(models.TextChoices):
    APPLIED = "applied"  # the action was taken
    SUPPRESSED = "suppressed"  # over the blast-radius cap: recorded for an operator to decide
    NO_ACTION = "no_action"  # the rules call for nothing (application XID, resolved alert, ...)
    PENDING = "pending"  # a repair (a GPU reset) under way
    REPAIRED = "repaired"  # the repair made the node healthy again: it stays in service


class RemediationStep(models.TextChoices):
    """What was (or is being) done: a rung of the remediation ladder."""

    GPU_RESET = "gpu_reset"
    QUARANTINE = "quarantine"


class Remediation(models.Model):
    fingerprint = models.CharField(max_length=64)
    starts_at = models.CharField(max_length=64, help_text="The alert's startsAt, as Alertmanager sent it.")
    alert = models.CharField(max_length=128, help_text="The alert's name.")
    alert_status = models.CharField(max_length=16)
    labels = models.JSONField(default=dict)
    node = models.ForeignKey("fleet.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="remediations")
    gpu = models.PositiveSmallIntegerField(null=True, blank=True)
    # The reservation the node served when it was quarantined: its replacement ends the incident.
    reservation = models.ForeignKey("reservations.Reservation", null=True, blank=True, on_delete=models.PROTECT)
    action = models.CharField(max_length=16)
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=RemediationStatus.choices)
    at = models.DateTimeField(db_default=Now(), db_index=True)
    decided_by = models.CharField(max_length=128, blank=True, help_text="Who applied a suppressed one.")
    step = models.CharField(max_length=16, choices=RemediationStep.choices, blank=True)
    # In the database rather than in a countdown message, which Redis would lose: the reconciler
    # sends the repair's next look when it is due (remediation.services.take_due_repairs).
    recheck_due_at = models.DateTimeField(null=True, blank=True, help_text="When the repair is looked at next.")
    step_started_at = models.DateTimeField(null=True, blank=True, help_text="When the agent began the GPU reset.")

    class Meta:
        ordering = ["-at", "-id"]
        permissions = [("apply_remediation", "Can apply a suppressed remediation (quarantine as an operator)")]
        constraints = [
            # Alertmanager repeats notifications: one alert occurrence is acted on once as firing and
            # once as resolved, so a resolved notification received first cannot swallow the firing one.
            models.UniqueConstraint(
                fields=["fingerprint", "starts_at", "alert_status"], name="remediation_once_per_alert_status"
            ),
            models.CheckConstraint(condition=Q(status__in=RemediationStatus.values), name="remediation_status_known"),
            models.CheckConstraint(
                condition=~Q(status=RemediationStatus.PENDING) | Q(recheck_due_at__isnull=False),
                name="remediation_pending_has_recheck_due",
            ),
            models.CheckConstraint(condition=Q(step__in=["", *RemediationStep.values]), name="remediation_step_known"),
            models.CheckConstraint(
                condition=~Q(status__in=[RemediationStatus.PENDING, RemediationStatus.REPAIRED])
                | Q(step=RemediationStep.GPU_RESET),
                name="remediation_repair_is_a_reset",
            ),
        ]
        indexes = [
            # The reconciler's sweep for the repairs that are due.
            models.Index(
                fields=["recheck_due_at"],
                name="remediation_recheck_due_idx",
                condition=Q(status=RemediationStatus.PENDING),
            ),
        ]

    def __str__(self):
        return f"{self.alert} on {self.node or '?'}: {self.status}"


class IncidentStep(models.TextChoices):
    ALERT_FIRING = "alert_firing"
    WEBHOOK_RECEIVED = "webhook_received"
    QUARANTINED = "quarantined"
    SUPPRESSED = "suppressed"
    GPU_RESET = "gpu_reset"  # the agent began resetting the GPU
    REPAIRED = "repaired"  # healthy again after it


class IncidentEvent(models.Model):
    """One step of an automatic remediation's timeline, for the dashboard and its replay; the
    replacement's steps come from the reservation's own history (console/pages/selectors.py)."""

    remediation = models.ForeignKey(Remediation, on_delete=models.CASCADE, related_name="timeline")
    step = models.CharField(max_length=32, choices=IncidentStep.choices)
    at = models.DateTimeField()
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.remediation_id} {self.step}"
