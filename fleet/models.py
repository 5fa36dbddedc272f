"""Topology (Pod, Rack, Node, GPU) and the append-only audit log.

Every invariant of the node lifecycle is repeated here as a named CHECK constraint, so a bug
anywhere else cannot store a broken row. Two more rules live in triggers (migration 0003_audit_triggers):
the audit log refuses UPDATE and DELETE, and a node's state cannot change, nor a node be
created, without an audit row written in the same transaction.
"""

import ipaddress

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from core.constraints import json_type_is
from core.validation import Invalid
from fleet import diagnostics, fabric, fabric_health, firmware, lifecycle, rollout_rules

NodeState = models.TextChoices("NodeState", [(s.name, s.value) for s in lifecycle.State])
NodeEvent = models.TextChoices("NodeEvent", [(e.name, e.value) for e in lifecycle.Event])


class AuditOnlyEvent(models.TextChoices):
    """Audited happenings that are not lifecycle transitions."""

    ENROLLED = "enrolled"
    STEP_CHANGED = "step_changed"
    RESULT_DISCARDED = "result_discarded"
    BMC_CHANGED = "bmc_changed", "BMC access changed"
    POWER_ACTION = "power_action", "power action"
    FIRMWARE_CHECKED = "firmware_checked", "firmware checked"


SHA256_HEX = r"^[0-9a-f]{64}$"


class GPUHealth(models.TextChoices):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


def _in(states) -> Q:
    return Q(state__in=sorted(s.value for s in states))


class Pod(models.Model):
    name = models.SlugField(max_length=32, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class FabricLevel(models.Model):
    """A level of the fabric between the pods and the racks (fleet/fabric.py): a leaf, a spine group."""

    name = models.CharField(max_length=32, unique=True)
    depth = models.PositiveSmallIntegerField(unique=True, help_text="1 just under the pod, counting down.")

    class Meta:
        ordering = ["depth"]
        constraints = [
            models.CheckConstraint(condition=Q(name__regex=f"^{fabric.LEVEL.pattern}$"), name="fabric_level_named"),
            models.CheckConstraint(
                condition=~Q(name__in=[fabric.POD, fabric.NVLINK_DOMAIN]), name="fabric_level_between_pod_and_rack"
            ),
            models.CheckConstraint(condition=Q(depth__gte=1), name="fabric_level_under_the_pod"),
        ]

    def __str__(self):
        return self.name


class FabricDomain(models.Model):
    """One domain of a fabric level: the nodes under one leaf switch, one spine group's."""

    level = models.ForeignKey(FabricLevel, on_delete=models.PROTECT, related_name="domains")
    name = models.SlugField(max_length=64, unique=True)
    pod = models.ForeignKey("Pod", on_delete=models.PROTECT, related_name="fabric_domains")
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        help_text="The domain one level up; none at the first level under the pod.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=~Q(parent=F("pk")), name="fabric_domain_not_its_own_parent")]

    def __str__(self):
        return f"{self.level.name} {self.name}"


class SwitchKind(models.TextChoices):
    LEAF = fabric.LEAF_SWITCH
    SPINE = fabric.SPINE_SWITCH


SwitchHealth = models.TextChoices("SwitchHealth", [(h.upper(), (h, h)) for h in fabric_health.HEALTHS])


# A switch whose last reading may cut nodes off (fabric_health.in_trouble), as a query: placement
# asks on every request whether any is, so a partial index of them answers from the few there are.
SWITCH_IN_TROUBLE = (
    Q(health=fabric_health.CRITICAL) | Q(state__in=sorted(fabric_health.DOWN_STATES)) | ~Q(links_down=[])
)


class FabricSwitch(models.Model):
    """A switch of the fabric, the domain it serves (a leaf switch its leaf, a spine its pod or spine
    group), and its health as workflows/fabric_health.py last read it from the switch manager."""

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=8, choices=SwitchKind.choices)
    fabric_domain = models.ForeignKey(
        FabricDomain,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="switches",
        help_text="The domain it serves; none when it serves a pod.",
    )
    pod = models.ForeignKey(
        Pod,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="switches",
        help_text="The pod it serves (a pod's spines); none when it serves a fabric domain.",
    )
    health = models.CharField(max_length=8, choices=SwitchHealth.choices, default=fabric_health.UNKNOWN)
    state = models.CharField(max_length=32, blank=True, help_text="Redfish Status.State as last read.")
    links_down = models.JSONField(default=list, blank=True, help_text="Its ports whose link was down at the last read.")
    read_at = models.DateTimeField(null=True, blank=True, help_text="The last successful read.")
    troubled_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when its reads have found it down or a port down; empty if not."
    )
    failure = models.TextField(blank=True, help_text="Why the last read failed; empty when it succeeded.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=SwitchKind.values), name="fabric_switch_kind_known"),
            models.CheckConstraint(condition=Q(health__in=SwitchHealth.values), name="fabric_switch_health_known"),
            models.CheckConstraint(
                condition=Q(fabric_domain__isnull=False, pod__isnull=True)
                | Q(fabric_domain__isnull=True, pod__isnull=False),
                name="fabric_switch_serves_one_domain",
            ),
        ]
        indexes = [models.Index(fields=["name"], condition=SWITCH_IN_TROUBLE, name="fabric_switch_in_trouble_idx")]

    def __str__(self):
        return f"{self.kind} switch {self.name}"


class Rack(models.Model):
    """A rack: one NVLink domain, the fabric's lowest level."""

    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="racks")
    name = models.SlugField(max_length=32, unique=True)
    fabric_domain = models.ForeignKey(
        FabricDomain,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="racks",
        help_text="Its domain at the fabric's deepest level above the racks (its leaf); none without levels.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Node(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    position = models.PositiveSmallIntegerField(help_text="Slot in the rack, from 1.")
    serial = models.CharField(max_length=64)

    # BMC and agent access. The credentials (BMC password, agent token) never appear in a listing, an
    # API answer or a log line; the addresses and username change only with the password re-entered
    # (fleet.services.change_bmc_access), the agent's address only with its token too.
    redfish_url = models.URLField(help_text="Base URL of the Redfish service.")
    system_id = models.CharField(max_length=64, help_text="Id of the node's System in that service.")
    bmc_username = models.CharField(max_length=64)
    bmc_password = models.CharField(max_length=128)
    agent_url = models.URLField(blank=True, help_text="The node's in-band agent.")
    agent_token = models.CharField(max_length=256, blank=True, help_text="The agent's bearer token. Never shown.")
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
        ]

    def __str__(self):
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

    def __str__(self):
        return f"{self.node_id}/gpu{self.index}"


class AuditEvent(models.Model):
    """One row per lifecycle transition and per audited happening. Append-only (a trigger)."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="audit_events")
    at = models.DateTimeField(db_default=Now(), db_index=True)
    actor = models.CharField(max_length=128)
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

    def __str__(self):
        return f"{self.node_id} {self.event} {self.from_state}->{self.to_state}"


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

    def __str__(self):
        return f"level {self.level} on {self.node_id}: {self.status}"


class Image(models.Model):
    """An OS image tenants may boot, from the operators' catalogue (GET /v1/images)."""

    class BootMode(models.TextChoices):
        UEFI = "UEFI"
        LEGACY = "Legacy"

    name = models.SlugField(max_length=64, unique=True)
    os = models.CharField(max_length=64, help_text="The OS family and release, e.g. ubuntu-24.04.")
    url = models.URLField(max_length=500, help_text="Where a BMC fetches it as virtual media.")
    sha256 = models.CharField(max_length=64, help_text="What the node must report it booted (hex).")
    boot_mode = models.CharField(max_length=8, choices=BootMode.choices, default=BootMode.UEFI)
    needs_secure_boot = models.BooleanField(default=False)
    default = models.BooleanField(default=False, help_text="What a reservation that names no image boots.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(sha256__regex=SHA256_HEX), name="image_sha256_is_hex"),
            models.UniqueConstraint(fields=["default"], condition=Q(default=True), name="image_one_default"),
        ]

    def __str__(self):
        return self.name


class AddressPool(models.Model):
    """Tenant-network addresses of a pod's nodes: one per node while it serves a tenant."""

    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="address_pools")
    network = models.CharField(max_length=64, help_text="CIDR, IPv4 or IPv6, e.g. 10.100.1.0/24.")
    gateway = models.GenericIPAddressField(null=True, blank=True)
    ssh_port = models.PositiveIntegerField(default=22, help_text="Where tenants reach their nodes' SSH.")

    class Meta:
        ordering = ["pod__name", "network"]
        constraints = [models.UniqueConstraint(fields=["network"], name="address_pool_network_unique")]

    def __str__(self):
        return f"{self.pod.name} {self.network}"

    def clean(self):
        try:
            network = ipaddress.ip_network(self.network)
        except ValueError as error:
            raise ValidationError({"network": f"not a network in CIDR form: {error}"}) from None
        if self.gateway and ipaddress.ip_address(self.gateway) not in network:
            raise ValidationError({"gateway": f"{self.gateway} is outside {network}"})


class NodeAddress(models.Model):
    """A node's address on the tenant network, from its pod's pool, while it serves a tenant."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="address")
    pool = models.ForeignKey(AddressPool, on_delete=models.PROTECT, related_name="addresses")
    address = models.GenericIPAddressField(unique=True)

    def __str__(self):
        return f"{self.node.name} {self.address}"


class ConfigDrive(models.Model):
    """A serving node's NoCloud config drive, served to its BMC at an unguessable URL until release."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="config_drive")
    token = models.CharField(max_length=64, unique=True)
    iso = models.BinaryField()
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self):
        return f"config drive of {self.node.name}"


class FirmwareBaseline(models.Model):
    """What every node of a class (its GPU model) must run: each firmware component's version and
    digest and the image that installs them, BIOS attributes, Secure Boot. Inspection compares a
    node with it after every wipe and repairs or quarantines (fleet/firmware.py)."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(
        max_length=128, blank=True, help_text="Nodes with this GPU model; empty: every node no other baseline matches."
    )
    bios_attributes = models.JSONField(
        default=dict,
        blank=True,
        help_text='Attributes the BIOS must hold, as its Redfish Bios resource names them: {"SriovEnable": true}.',
    )
    secure_boot_required = models.BooleanField(default=True)
    boot_releases = models.JSONField(
        default=list,
        blank=True,
        help_text="The boot-chain releases (bootloader, kernel, initrd, service image...) nodes of this class may "
        'boot, as the reference values name them: ["vmlinuz-6.8.0-49-generic", ...]. Empty: every imported '
        "release not retired.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["gpu_model", "name"]
        constraints = [
            models.UniqueConstraint(fields=["gpu_model"], name="firmware_baseline_one_per_node_class"),
            models.CheckConstraint(
                condition=json_type_is("bios_attributes", "object"),
                name="firmware_baseline_bios_attributes_object",
            ),
            models.CheckConstraint(
                condition=json_type_is("boot_releases", "array"),
                name="firmware_baseline_boot_releases_array",
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        for field, parse in (
            ("bios_attributes", firmware.parse_bios_attributes),
            ("boot_releases", firmware.parse_boot_releases),
        ):
            try:
                parse(getattr(self, field), field)
            except Invalid as error:
                raise ValidationError({field: str(error)}) from error

    def as_baseline(self) -> firmware.Baseline:
        return firmware.Baseline(
            name=self.name,
            gpu_model=self.gpu_model,
            components={c.component: firmware.Expected(c.version, c.sha256, c.image) for c in self.components.all()},
            bios_attributes=dict(self.bios_attributes),
            secure_boot_required=self.secure_boot_required,
            boot_releases=tuple(self.boot_releases),
        )


class FirmwareBaselineComponent(models.Model):
    """One component a baseline expects: by kind (a Redfish SoftwareId, "VBIOS": every GPU's) or by
    one component's name ("GPU3 VBIOS"), which wins over its kind."""

    baseline = models.ForeignKey(FirmwareBaseline, on_delete=models.CASCADE, related_name="components")
    component = models.CharField(max_length=64, help_text='"BIOS", "BMC", "VBIOS", "NIC", or one: "NIC0".')
    version = models.CharField(max_length=128)
    sha256 = models.CharField(max_length=64, verbose_name="SHA-256", help_text="Its digest (lower-case hex).")
    image = models.CharField(
        max_length=200,
        blank=True,
        help_text="The file that installs it, under GPUFLEET_FIRMWARE_IMAGE_BASE_URL; empty: a drift quarantines.",
    )

    class Meta:
        ordering = ["baseline", "component"]
        constraints = [
            models.UniqueConstraint(fields=["baseline", "component"], name="firmware_component_once_per_baseline"),
            models.CheckConstraint(
                condition=Q(component__regex=f"^{firmware.COMPONENT.pattern}$"), name="firmware_component_named"
            ),
            models.CheckConstraint(condition=~Q(version=""), name="firmware_component_has_version"),
            models.CheckConstraint(condition=Q(sha256__regex=SHA256_HEX), name="firmware_component_sha256_is_hex"),
            models.CheckConstraint(
                condition=Q(image="") | Q(image__regex=f"^{firmware.IMAGE.pattern}$"),
                name="firmware_component_image_is_a_file_name",
            ),
        ]

    def __str__(self):
        return f"{self.baseline.name} {self.component} {self.version}"


RolloutStatus = models.TextChoices("RolloutStatus", [(s.name, s.value) for s in rollout_rules.RolloutStatus])
RolloutNodeStatus = models.TextChoices("RolloutNodeStatus", [(s.name, s.value) for s in rollout_rules.NodeStatus])


def _values(statuses) -> list[str]:
    return sorted(s.value for s in statuses)


def _finished_exactly_when(statuses) -> Q:
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

    def __str__(self):
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

    def __str__(self):
        return f"{self.node} in rollout {self.rollout_id}: {self.status}"
