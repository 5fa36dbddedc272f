"""Long diagnostics runs on idle nodes, each a row that outlives the worker watching it."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from fleet import diagnostics
from fleet.models.nodes import Node


class IdleDiagnosticStatus(models.TextChoices):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    PREEMPTED = "preempted"
    INTERRUPTED = "interrupted"


class IdleDiagnosticRun(models.Model):
    """A long diagnostics run on an available node, at low priority (workflows/idle_diagnostics.py).

    The run's state is here, not in a worker: a worker that dies loses nothing, the next look
    carries on. It ends with a verdict (passed, failed), preempted (the node was wanted: placement,
    an operator) or interrupted (no verdict: the agent lost the run, cannot run one, or overran).
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="idle_diagnostic_runs")
    level = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=IdleDiagnosticStatus.choices, default=IdleDiagnosticStatus.RUNNING)
    created_at = models.DateTimeField(db_default=Now())
    # When the agent says it started the run (its clock): how a later answer is known to be this run's.
    started_at = models.DateTimeField(null=True, blank=True)
    look_due_at = models.DateTimeField(db_default=Now(), help_text="When a worker looks at the run next.")
    ended_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=Q(status="running"), name="idle_diagnostics_one_running_per_node"
            ),
            models.CheckConstraint(condition=Q(level__in=diagnostics.LEVELS), name="idle_diagnostics_level_known"),
            models.CheckConstraint(
                condition=Q(status__in=IdleDiagnosticStatus.values), name="idle_diagnostics_status_known"
            ),
            models.CheckConstraint(
                condition=Q(status="running", ended_at__isnull=True)
                | (~Q(status="running") & Q(ended_at__isnull=False)),
                name="idle_diagnostics_ended_exactly_when_not_running",
            ),
        ]
        indexes = [
            models.Index(fields=["look_due_at"], name="idle_diagnostics_due_idx", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"level {self.level} on {self.node_id}: {self.status}"
