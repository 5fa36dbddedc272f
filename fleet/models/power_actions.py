"""Tenants' reboots and power cycles of their nodes, kept as due work (core/due_work.py).

The request is a row before it is a message: the message that carries it out can be lost with
Redis, dropped in a backlog or delivered twice, and the row decides. A worker takes the row with a
compare-and-set before it asks the BMC, so the action runs once; the reconciler sends again what
no worker took; one whose reservation no longer holds the node is closed as expired, never run.
The forced restart of a reboot the OS ignored is the same row, due again once the grace is over.
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from fleet.models.nodes import Node


class PowerActionKind(models.TextChoices):
    """As the tenant's API names them."""

    REBOOT = "reboot"
    POWER_CYCLE = "power-cycle"


class PowerActionState(models.TextChoices):
    DUE = "due"  # to be asked of the BMC
    ASKING = "asking"  # a worker took it and is asking the BMC
    RESTART_DUE = "restart_due"  # a graceful restart was asked: once due, checked and forced if ignored
    CHECKING = "checking"  # a worker took that check
    DONE = "done"
    # The BMC refused, or the worker that took it stopped mid-call: never tried again on a guess,
    # since a reset that did happen must not happen twice.
    FAILED = "failed"
    EXPIRED = "expired"  # the reservation no longer held the node when it came due
    SUPERSEDED = "superseded"  # a later request for the node took its place before it began


WAITING = [PowerActionState.DUE, PowerActionState.RESTART_DUE]
TAKEN = [PowerActionState.ASKING, PowerActionState.CHECKING]
OPEN = WAITING + TAKEN
RESTARTING = [PowerActionState.RESTART_DUE, PowerActionState.CHECKING]


class PowerAction(models.Model):
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="power_actions")
    # The reservation that asked: the action is done only while it still holds the node.
    reservation = models.ForeignKey("reservations.Reservation", on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=16, choices=PowerActionKind.choices)
    requested_by = models.CharField(max_length=128)
    requested_at = models.DateTimeField(db_default=Now())
    state = models.CharField(max_length=16, choices=PowerActionState.choices, default=PowerActionState.DUE)
    due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the reconciler sends it (again) if no worker has taken it."
    )
    taken_at = models.DateTimeField(null=True, blank=True, help_text="When a worker last took it.")
    # A reboot is proven by the BMC's LastResetTime moving past what it read before asking for it.
    reset_before = models.CharField(max_length=64, blank=True, help_text="The BMC's LastResetTime before the reboot.")
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.TextField(blank=True, help_text="What came of it.")

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=PowerActionState.values), name="power_action_state_known"),
            models.CheckConstraint(condition=Q(action__in=PowerActionKind.values), name="power_action_kind_known"),
            models.CheckConstraint(condition=~Q(requested_by=""), name="power_action_has_requester"),
            # A second request waits for the first to be done or replaces it (fleet.services.power).
            models.UniqueConstraint(
                fields=["node"], condition=Q(state__in=OPEN), name="power_action_one_open_per_node"
            ),
            models.CheckConstraint(
                condition=Q(state__in=WAITING, due_at__isnull=False) | (~Q(state__in=WAITING) & Q(due_at__isnull=True)),
                name="power_action_due_only_while_waiting",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=TAKEN) | Q(taken_at__isnull=False), name="power_action_taken_has_time"
            ),
            models.CheckConstraint(
                condition=Q(state__in=OPEN, finished_at__isnull=True)
                | (~Q(state__in=OPEN) & Q(finished_at__isnull=False)),
                name="power_action_finished_once_closed",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=RESTARTING) | Q(action=PowerActionKind.REBOOT),
                name="power_action_only_a_reboot_is_forced",
            ),
        ]
        indexes = [
            # The reconciler's sweeps: what is due, and what a worker took and never finished.
            models.Index(fields=["due_at"], name="power_action_due_idx", condition=Q(state__in=WAITING)),
            models.Index(fields=["taken_at"], name="power_action_taken_idx", condition=Q(state__in=TAKEN)),
        ]

    def __str__(self) -> str:
        return f"{self.action} of {self.node_id}: {self.state}"
