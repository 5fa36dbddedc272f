"""Where nodes sit: pods, the fabric's levels and domains between the pod and the rack, the
switches that serve those domains (with their health as last read), and racks."""

from django.db import models
from django.db.models import F, Q

from core.topology import LEAF_SWITCH, NVLINK_DOMAIN, POD, SPINE_SWITCH
from fleet import fabric, fabric_health


class Pod(models.Model):
    name = models.SlugField(max_length=32, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
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
                condition=~Q(name__in=[POD, NVLINK_DOMAIN]), name="fabric_level_between_pod_and_rack"
            ),
            models.CheckConstraint(condition=Q(depth__gte=1), name="fabric_level_under_the_pod"),
        ]

    def __str__(self) -> str:
        return self.name


class FabricDomain(models.Model):
    """One domain of a fabric level: the nodes under one leaf switch, one spine group's."""

    level = models.ForeignKey(FabricLevel, on_delete=models.PROTECT, related_name="domains")
    name = models.SlugField(max_length=64, unique=True)
    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="fabric_domains")
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

    def __str__(self) -> str:
        return f"{self.level.name} {self.name}"


class SwitchKind(models.TextChoices):
    LEAF = LEAF_SWITCH
    SPINE = SPINE_SWITCH


class SwitchHealth(models.TextChoices):
    """fabric_health.HEALTHS, each labelled as Redfish spells it."""

    OK = fabric_health.OK, fabric_health.OK
    WARNING = fabric_health.WARNING, fabric_health.WARNING
    CRITICAL = fabric_health.CRITICAL, fabric_health.CRITICAL
    UNKNOWN = fabric_health.UNKNOWN, fabric_health.UNKNOWN


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

    def __str__(self) -> str:
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

    def __str__(self) -> str:
        return self.name
