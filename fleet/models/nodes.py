"""Nodes, their GPUs and the append-only audit log of what happened to them.

Every invariant of the node lifecycle is repeated here as a named CHECK constraint, so a bug
anywhere else cannot store a broken row. Two more rules live in triggers (migration 0003_audit_triggers):
the audit log refuses UPDATE and DELETE, and a node's state cannot change, nor a node be
created, without an audit row written in the same transaction.
"""

from collections.abc import Iterable

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from core import acting
from core.constraints import json_type_is
from fleet import diagnostics, lifecycle
from fleet.lifecycle import Event, State
from fleet.models.topology import Pod, Rack


class NodeState(models.TextChoices):
    """lifecycle.State, member for member, as a model's choices."""

    ENROLLED = State.ENROLLED
    INSPECTING = State.INSPECTING
    AVAILABLE = State.AVAILABLE
    PROVISIONING = State.PROVISIONING
    ACTIVE = State.ACTIVE
    WIPING = State.WIPING
    QUARANTINED = State.QUARANTINED
    MAINTENANCE = State.MAINTENANCE


class NodeEvent(models.TextChoices):
    """lifecycle.Event, member for member, as a model's choices."""

    INSPECTION_STARTED = Event.INSPECTION_STARTED
    INSPECTION_PASSED = Event.INSPECTION_PASSED
    INSPECTION_FAILED = Event.INSPECTION_FAILED
    DIAGNOSTIC_FAILED = Event.DIAGNOSTIC_FAILED
    FIRMWARE_DRIFT = Event.FIRMWARE_DRIFT
    ATTESTATION_PASSED = Event.ATTESTATION_PASSED
    ATTESTATION_FAILED = Event.ATTESTATION_FAILED
    PROVISION_REQUESTED = Event.PROVISION_REQUESTED
    PROVISION_SUCCEEDED = Event.PROVISION_SUCCEEDED
    PROVISION_FAILED = Event.PROVISION_FAILED
    RELEASED = Event.RELEASED
    WIPE_SUCCEEDED = Event.WIPE_SUCCEEDED
    WIPE_FAILED = Event.WIPE_FAILED
    HARDWARE_FAULT = Event.HARDWARE_FAULT
    OPERATOR_QUARANTINE = Event.OPERATOR_QUARANTINE
    OPERATOR_MAINTENANCE = Event.OPERATOR_MAINTENANCE
    OPERATOR_RETURN = Event.OPERATOR_RETURN
    TENANT_REPORT = Event.TENANT_REPORT
    REINSTALL_REQUESTED = Event.REINSTALL_REQUESTED
    FIRMWARE_UPDATE = Event.FIRMWARE_UPDATE


class AuditOnlyEvent(models.TextChoices):
    """Audited happenings that are not lifecycle transitions."""

    ENROLLED = "enrolled"
    STEP_CHANGED = "step_changed"
    RESULT_DISCARDED = "result_discarded"
    BMC_CHANGED = "bmc_changed", "BMC access changed"
    POWER_ACTION = "power_action", "power action"
    FIRMWARE_CHECKED = "firmware_checked", "firmware checked"
    # A report with an agent credential that is revoked (an earlier boot's or tenancy's) or another node's.
    CREDENTIAL_REFUSED = "credential_refused", "agent credential refused"
    # A port or GUID read back on a segment it must not be on, and put back; every membership of the
    # node read back as it should be (fleet/models/networks.py).
    FABRIC_DRIFT_REPAIRED = "fabric_drift_repaired", "fabric drift repaired"
    NETWORKS_CONFIRMED = "networks_confirmed", "networks confirmed"


class GPUHealth(models.TextChoices):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


def _in(states: Iterable[State]) -> Q:
    return Q(state__in=sorted(s.value for s in states))


class Node(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    position = models.PositiveSmallIntegerField(help_text="Slot in the rack, from 1.")
    serial = models.CharField(max_length=64)

    # BMC and agent access. The BMC password never appears in a listing, an API answer or a log
    # line; the addresses and username change only with it re-entered (fleet.services.change_bmc_access).
    # The agent's credentials are minted per boot and per tenancy (fleet/models/node_credentials.py).
    redfish_url = models.URLField(help_text="Base URL of the Redfish service.")
    system_id = models.CharField(max_length=64, help_text="Id of the node's System in that service.")
    bmc_username = models.CharField(max_length=64)
    bmc_password = models.CharField(max_length=128)
    agent_url = models.URLField(blank=True, help_text="The node's in-band agent.")
    # What the tenant's OS reported at provisioning; gone with the tenant.
    ssh_host_key_fingerprint = models.CharField(max_length=128, blank=True)
    # The image a reinstall chose for this node; none: its reservation's.
    reinstall_image = models.ForeignKey("Image", null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.ENROLLED)
    state_since = models.DateTimeField(db_default=Now())
    tenant = models.ForeignKey("reservations.Tenant", null=True, blank=True, on_delete=models.PROTECT)
    reservation = models.ForeignKey("reservations.Reservation", null=True, blank=True, on_delete=models.PROTECT)
    quarantine_reason = models.TextField(blank=True)
    step = models.CharField(max_length=64, blank=True, help_text="Current workflow step.")
    step_since = models.DateTimeField(null=True, blank=True)
    # Set while a remediation ladder repairs the node (remediation.services): placement gives it
    # to no new tenant until the ladder ends, repaired or quarantined.
    under_repair = models.BooleanField(default=False, help_text="A remediation ladder is repairing it.")
    # The last diagnostics run the node passed (fleet/diagnostics.py): at inspection or while idle.
    attributes = models.JSONField(
        default=dict, blank=True, help_text='What the inventory says of it beyond its GPUs: {"nic": "cx7"}.'
    )
    diagnostic_passed_at = models.DateTimeField(null=True, blank=True)
    diagnostic_level = models.PositiveSmallIntegerField(null=True, blank=True)

    # Where it plugs into the fabrics that keep tenants apart, as the inventory says
    # (fleet/models/networks.py): its Ethernet leaf switch and port, its HCA ports' GUIDs.
    ethernet_switch = models.CharField(max_length=64, blank=True)
    ethernet_port = models.CharField(max_length=32, blank=True, help_text='As the switch names it: "swp1".')
    hca_guids = ArrayField(
        models.CharField(max_length=16), default=list, blank=True, help_text="16 hex digits each, as UFM writes them."
    )

    # Lease with fencing (fleet/leases.py): the token grows on every claim.
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        # The admin's actions: `change` is too broad for taking nodes out of (or into) service.
        permissions = [
            ("quarantine_node", "Can quarantine a node"),
            ("return_node_to_service", "Can return a node to service"),
            ("put_node_into_maintenance", "Can put a node into maintenance"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["rack", "position"], name="node_one_per_rack_slot"),
            models.CheckConstraint(condition=Q(position__gte=1), name="node_position_from_1"),
            models.CheckConstraint(condition=_in(lifecycle.State), name="node_state_known"),
            models.CheckConstraint(
                condition=~_in(lifecycle.SERVING_STATES) | Q(tenant__isnull=False, reservation__isnull=False),
                name="node_provisioning_or_active_has_tenant_and_reservation",
            ),
            models.CheckConstraint(
                condition=_in(lifecycle.SERVING_STATES) | Q(reservation__isnull=True),
                name="node_reservation_only_while_provisioning_or_active",
            ),
            models.CheckConstraint(
                condition=~_in(lifecycle.CLEAN_STATES) | Q(tenant__isnull=True),
                name="node_enrolled_inspecting_available_have_no_tenant",
            ),
            models.CheckConstraint(
                condition=~_in(lifecycle.REASON_REQUIRED) | ~Q(quarantine_reason=""),
                name="node_quarantined_has_reason",
            ),
            models.CheckConstraint(
                condition=_in(lifecycle.REASON_REQUIRED) | Q(quarantine_reason=""),
                name="node_reason_only_when_quarantined",
            ),
            models.CheckConstraint(
                condition=Q(lease_owner="", lease_expires_at__isnull=True)
                | (~Q(lease_owner="") & Q(lease_expires_at__isnull=False, fencing_token__gt=0)),
                name="node_lease_owner_has_expiry_and_token",
            ),
            models.CheckConstraint(condition=Q(fencing_token__gte=0), name="node_fencing_token_not_negative"),
            models.UniqueConstraint(
                fields=["ethernet_switch", "ethernet_port"],
                condition=~Q(ethernet_port=""),
                name="node_one_per_ethernet_port",
            ),
            models.CheckConstraint(
                condition=Q(ethernet_switch="", ethernet_port="") | (~Q(ethernet_switch="") & ~Q(ethernet_port="")),
                name="node_ethernet_switch_and_port_together",
            ),
            models.CheckConstraint(condition=json_type_is("attributes", "object"), name="node_attributes_object"),
            models.CheckConstraint(
                condition=_in(lifecycle.SERVING_STATES) | Q(ssh_host_key_fingerprint="", reinstall_image__isnull=True),
                name="node_host_key_and_reinstall_image_only_while_serving",
            ),
            models.CheckConstraint(
                condition=Q(step="", step_since__isnull=True) | (~Q(step="") & Q(step_since__isnull=False)),
                name="node_step_has_since",
            ),
            models.CheckConstraint(
                condition=Q(diagnostic_passed_at__isnull=True, diagnostic_level__isnull=True)
                # The level is checked as not null too: NULL IN (...) is no violation to PostgreSQL.
                | Q(
                    diagnostic_passed_at__isnull=False,
                    diagnostic_level__isnull=False,
                    diagnostic_level__in=diagnostics.LEVELS,
                ),
                name="node_diagnostic_pass_has_time_and_level",
            ),
        ]
        indexes = [
            # The claim query of fleet/leases.py: nodes owing work, longest waiting first.
            models.Index(
                fields=["state_since", "id"], name="node_owing_work_idx", condition=_in(lifecycle.WORK_STATES)
            ),
            # Every placement asks which nodes cannot serve (by state, or under repair) and which
            # passed long diagnostics lately: a few rows each, not a scan of the fleet.
            models.Index(fields=["state"], name="node_state_idx"),
            models.Index(fields=["id"], name="node_under_repair_idx", condition=Q(under_repair=True)),
            models.Index(
                fields=["diagnostic_passed_at"],
                name="node_diagnostic_passed_idx",
                condition=Q(diagnostic_passed_at__isnull=False),
            ),
            # The fleet floor counts every rack's nodes by state after a change: read from this
            # index alone (an index-only scan), not from the table's rows.
            models.Index(fields=["rack", "state"], name="node_rack_state_idx"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def pod(self) -> Pod:
        return self.rack.pod


class GPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    serial = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128)
    health = models.CharField(max_length=16, choices=GPUHealth.choices, default=GPUHealth.UNKNOWN)

    class Meta:
        ordering = ["node", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_one_per_node_index"),
            models.CheckConstraint(condition=Q(health__in=GPUHealth.values), name="gpu_health_known"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}/gpu{self.index}"


class AuditEvent(models.Model):
    """One row per lifecycle transition and per audited happening. Append-only (a trigger)."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="audit_events")
    at = models.DateTimeField(db_default=Now(), db_index=True)
    actor = models.CharField(max_length=128)
    # The person and the API key (its prefix) of the request that wrote the row (core.acting), if any.
    user = models.CharField(max_length=150, blank=True, default=acting.user, db_default="")
    key = models.CharField(max_length=16, blank=True, default=acting.key, db_default="")
    event = models.CharField(max_length=32, choices=NodeEvent.choices + AuditOnlyEvent.choices)
    from_state = models.CharField(max_length=16, choices=NodeState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=NodeState.choices, blank=True)
    reason = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    # The writing transaction, so a trigger can tell that a state change brought its row.
    txid = models.BigIntegerField(db_default=RawSQL("pg_current_xact_id()::text::bigint", ()), editable=False)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(actor=""), name="audit_has_actor"),
            models.CheckConstraint(
                condition=Q(event__in=NodeEvent.values + AuditOnlyEvent.values), name="audit_event_known"
            ),
        ]
        indexes = [models.Index(fields=["node", "txid"], name="audit_node_txid_idx")]

    def __str__(self) -> str:
        return f"{self.node_id} {self.event} {self.from_state}->{self.to_state}"
