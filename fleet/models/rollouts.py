"""Firmware rollouts: a baseline taken to the idle nodes of its class in batches, node by node."""

from collections.abc import Iterable

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from fleet import rollout_rules
from fleet.models.baselines import FirmwareBaseline
from fleet.models.nodes import Node
from fleet.rollout_rules import NodeStatus


class RolloutStatus(models.TextChoices):
    """rollout_rules.RolloutStatus, member for member, as a model's choices."""

    RUNNING = rollout_rules.RolloutStatus.RUNNING
    PAUSED = rollout_rules.RolloutStatus.PAUSED
    COMPLETED = rollout_rules.RolloutStatus.COMPLETED
    CANCELLED = rollout_rules.RolloutStatus.CANCELLED


class RolloutNodeStatus(models.TextChoices):
    """rollout_rules.NodeStatus, member for member, as a model's choices."""

    PENDING = NodeStatus.PENDING
    UPDATING = NodeStatus.UPDATING
    UPDATED = NodeStatus.UPDATED
    FAILED = NodeStatus.FAILED
    AT_NEXT_HANDOFF = NodeStatus.AT_NEXT_HANDOFF


def _values(statuses: Iterable[rollout_rules.RolloutStatus | NodeStatus]) -> list[str]:
    return sorted(s.value for s in statuses)


def _finished_exactly_when(statuses: Iterable[rollout_rules.RolloutStatus | NodeStatus]) -> Q:
    """finished_at is set exactly when the status is one of `statuses`."""
    return Q(status__in=_values(statuses), finished_at__isnull=False) | (
        ~Q(status__in=_values(statuses)) & Q(finished_at__isnull=True)
    )


class FirmwareRollout(models.Model):
    """An operator's rollout of a baseline to the idle nodes of its class, in batches under a per-pod
    cap, paused on the first failure (fleet/rollout_rules.py decides, fleet/firmware_rollouts.py
    applies it). Nodes in use get the baseline at their next handoff; the rollout counts them."""

    baseline = models.ForeignKey(FirmwareBaseline, on_delete=models.PROTECT, related_name="rollouts")
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.RUNNING)
    batch_size = models.PositiveIntegerField(help_text="Nodes updated at once, in all.")
    per_pod_cap = models.PositiveIntegerField(help_text="Nodes of one pod updated at once.")
    started_by = models.CharField(max_length=128, help_text="Who started it: operator:<name>.")
    started_at = models.DateTimeField(db_default=Now())
    paused_reason = models.TextField(blank=True, help_text="Why it paused: the first failure, or who paused it.")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        # The admin's actions (starting one is the baseline's): `change` is too broad for taking nodes
        # out of service, or for stopping that.
        permissions = [
            ("start_firmware_rollout", "Can roll a firmware baseline out to the fleet"),
            ("pause_firmware_rollout", "Can pause a firmware rollout"),
            ("resume_firmware_rollout", "Can resume a firmware rollout"),
            ("cancel_firmware_rollout", "Can cancel a firmware rollout"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["baseline"],
                condition=Q(status__in=_values(rollout_rules.UNDER_WAY)),
                name="firmware_rollout_one_under_way_per_baseline",
            ),
            models.CheckConstraint(condition=Q(status__in=RolloutStatus.values), name="firmware_rollout_status_known"),
            models.CheckConstraint(
                condition=Q(batch_size__gte=1, per_pod_cap__gte=1), name="firmware_rollout_limits_at_least_1"
            ),
            models.CheckConstraint(condition=~Q(started_by=""), name="firmware_rollout_has_starter"),
            models.CheckConstraint(
                condition=~Q(status=RolloutStatus.PAUSED) | ~Q(paused_reason=""),
                name="firmware_rollout_paused_has_reason",
            ),
            models.CheckConstraint(
                condition=_finished_exactly_when(rollout_rules.FINISHED),
                name="firmware_rollout_finished_exactly_when_over",
            ),
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.baseline.name}"

    @property
    def limits(self) -> rollout_rules.Limits:
        return rollout_rules.Limits(batch_size=self.batch_size, per_pod_cap=self.per_pod_cap)

    @property
    def actor(self) -> str:
        """Who acts on the nodes in its name: the rollout, and the operator who started it."""
        return f"rollout:{self.pk} by {self.started_by}"


class FirmwareRolloutNode(models.Model):
    """One node of the baseline's class in a rollout: where its update stands, and why."""

    rollout = models.ForeignKey(FirmwareRollout, on_delete=models.CASCADE, related_name="nodes")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="firmware_rollouts")
    status = models.CharField(max_length=16, choices=RolloutNodeStatus.choices)
    reason = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the rollout sent it to inspection.")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When it was found updated, or failed.")

    class Meta:
        ordering = ["rollout", "node"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "node"], name="firmware_rollout_node_once"),
            models.CheckConstraint(
                condition=Q(status__in=RolloutNodeStatus.values), name="firmware_rollout_node_status_known"
            ),
            models.CheckConstraint(
                condition=~Q(status=RolloutNodeStatus.FAILED) | ~Q(reason=""),
                name="firmware_rollout_node_failed_has_reason",
            ),
            models.CheckConstraint(
                condition=~Q(status=RolloutNodeStatus.UPDATING) | Q(started_at__isnull=False),
                name="firmware_rollout_node_updating_has_start",
            ),
            models.CheckConstraint(
                condition=_finished_exactly_when(rollout_rules.DONE),
                name="firmware_rollout_node_finished_exactly_when_done",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node} in rollout {self.rollout_id}: {self.status}"
