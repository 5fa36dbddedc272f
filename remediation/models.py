"""Every alert the control plane received, what it did about it, and the incident's timeline."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now


class RemediationStatus(models.TextChoices):
    APPLIED = "applied"  # the action was taken
    SUPPRESSED = "suppressed"  # over the blast-radius cap: recorded for an operator to decide
    NO_ACTION = "no_action"  # the rules call for nothing (application XID, resolved alert, ...)
    PENDING = "pending"  # climbing the ladder's repair rungs (GPU reset, reboot, power cycle)
    REPAIRED = "repaired"  # a repair made the GPU healthy again: the node stays in service


class RemediationStep(models.TextChoices):
    """What was (or is being) done: a rung of the remediation ladder (remediation.rules.Step)."""

    GPU_RESET = "gpu_reset"
    REBOOT = "reboot"
    POWER_CYCLE = "power_cycle"
    QUARANTINE = "quarantine"


REPAIR_STEPS = [RemediationStep.GPU_RESET, RemediationStep.REBOOT, RemediationStep.POWER_CYCLE]


class RemediationMode(models.TextChoices):
    ENFORCE = "enforce"
    SHADOW = "shadow"  # the rule's decision is recorded, nothing is done


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
    action = models.CharField(max_length=16, help_text="The ladder the rules called for (remediation.rules.LADDERS).")
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=RemediationStatus.choices)
    at = models.DateTimeField(db_default=Now(), db_index=True)
    decided_by = models.CharField(max_length=128, blank=True, help_text="Who applied a suppressed one.")
    step = models.CharField(max_length=16, choices=RemediationStep.choices, blank=True)
    # In the database rather than in a countdown message, which Redis would lose: the reconciler
    # sends the repair's next look when it is due (remediation.services.take_due_repairs).
    recheck_due_at = models.DateTimeField(null=True, blank=True, help_text="When the repair is looked at next.")
    step_started_at = models.DateTimeField(null=True, blank=True, help_text="When the current rung was acted on.")
    mode = models.CharField(max_length=8, choices=RemediationMode.choices, default=RemediationMode.ENFORCE)
    # A reboot is proven by the BMC's LastResetTime moving past what it read before asking for it.
    reset_before = models.CharField(max_length=64, blank=True, help_text="The BMC's LastResetTime before the rung.")
    forced_at = models.DateTimeField(null=True, blank=True, help_text="When a reboot the OS ignored was forced.")
    # The incident's span against the blast-radius cap (remediation/blast_radius.py): from when the
    # cap let it act, under the cap's lock, to when its last action ended (open while it climbs).
    counted_from = models.DateTimeField(
        null=True, blank=True, help_text="When the blast-radius cap let this automatic remediation act."
    )
    counted_until = models.DateTimeField(
        null=True, blank=True, help_text="When its last action ended; empty while its ladder climbs."
    )
    # A fault that software on the node reported while a tenant held it (remediation.rules.said_by_the_node):
    # its span spends this tenant's budget (TENANT_FAULT_BUDGET), never the blast-radius cap.
    self_reported_by = models.ForeignKey(
        "reservations.Tenant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="self_reported_faults",
        help_text="The tenant whose node reported this fault of itself: it spends that tenant's budget.",
    )

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
                | Q(step__in=REPAIR_STEPS),
                name="remediation_repair_is_a_repair_step",
            ),
            models.CheckConstraint(condition=Q(mode__in=RemediationMode.values), name="remediation_mode_known"),
            # A shadow rule acts on nothing, so it can neither hold a repair open nor quarantine.
            models.CheckConstraint(
                condition=~Q(mode=RemediationMode.SHADOW) | Q(status=RemediationStatus.NO_ACTION),
                name="remediation_shadow_acts_on_nothing",
            ),
            # What the cap counts: a ladder climbing is counted and open, a repair ended is closed,
            # and neither a shadow rule, a suppressed alert nor an operator's decision counts.
            models.CheckConstraint(
                condition=~Q(status=RemediationStatus.PENDING)
                | Q(counted_from__isnull=False, counted_until__isnull=True),
                name="remediation_climbing_is_counted",
            ),
            models.CheckConstraint(
                condition=~Q(status=RemediationStatus.REPAIRED) | Q(counted_until__isnull=False),
                name="remediation_repaired_is_counted",
            ),
            models.CheckConstraint(
                condition=Q(counted_until__isnull=True)
                | Q(counted_from__isnull=False, counted_until__gte=F("counted_from")),
                name="remediation_counted_span_in_order",
            ),
            models.CheckConstraint(
                condition=Q(counted_from__isnull=True)
                | (
                    Q(mode=RemediationMode.ENFORCE, decided_by="", node__isnull=False)
                    & ~Q(status=RemediationStatus.SUPPRESSED)
                ),
                name="remediation_counted_is_automatic",
            ),
        ]
        indexes = [
            # The cap's count: the incidents still climbing or ended within the window.
            models.Index(
                fields=["counted_until"], name="remediation_counted_idx", condition=Q(counted_from__isnull=False)
            ),
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
    TENANT_NOTIFIED = "tenant_notified"  # the node's tenant was told what will be done, and when
    GPU_RESET = "gpu_reset"  # the agent began resetting the GPU
    REBOOT = "reboot"  # the BMC was asked to restart the node
    REBOOT_FORCED = "reboot_forced"  # the OS ignored the graceful restart: forced
    POWER_CYCLE = "power_cycle"  # the BMC was asked to power cycle the node
    ESCALATED = "escalated"  # the rung did not make the GPU healthy: the next one
    REPAIRED = "repaired"  # healthy again after a rung
    SHADOW = "shadow"  # a shadow rule's decision: nothing was done


class IncidentEvent(models.Model):
    """One step of an automatic remediation's timeline, for the dashboard and its replay; the
    replacement's steps come from the reservation's own history (console/pages/selectors/incidents.py)."""

    remediation = models.ForeignKey(Remediation, on_delete=models.CASCADE, related_name="timeline")
    step = models.CharField(max_length=32, choices=IncidentStep.choices)
    at = models.DateTimeField()
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.remediation_id} {self.step}"


class BMCEventLogCursor(models.Model):
    """How far the control plane has read a node's BMC event log (SEL), so that a read asks for what
    is new only (workflows/bmc_event_logs.py): one per node whose BMC it manages."""

    node = models.OneToOneField("fleet.Node", on_delete=models.CASCADE, related_name="event_log_cursor")
    entries_path = models.TextField(blank=True, help_text="The SEL's Entries on the BMC, found at the first read.")
    last_entry_id = models.CharField(
        max_length=128, blank=True, help_text="The Id of the newest entry read; empty if the log was empty."
    )
    last_entry_created = models.CharField(
        max_length=64, blank=True, help_text="Its Created: with the Id, it names the entry in a log whose Ids restart."
    )
    position = models.PositiveIntegerField(
        default=0, help_text="Where that entry stood in the log, from 1: the next read starts there."
    )
    etag = models.TextField(blank=True, help_text="The log's ETag at the last read: while unchanged, the BMC says 304.")
    read_at = models.DateTimeField(
        null=True, blank=True, help_text="The last read. The first takes the log as it stands as history."
    )
    # In the database, claimed by the sweep (core.due_work): overlapping sweeps never read one BMC twice.
    read_due_at = models.DateTimeField(db_default=Now(), help_text="When the log is read next.")
    failure = models.TextField(blank=True, help_text="Why the last read failed, if it did.")

    class Meta:
        verbose_name = "BMC event log cursor"
        indexes = [models.Index(fields=["read_due_at"], name="event_log_cursor_due_idx")]

    def __str__(self):
        return f"{self.node_id} SEL at {self.last_entry_id or '-'}"
