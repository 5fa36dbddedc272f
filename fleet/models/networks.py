"""The networks that keep tenants apart: the numbers each fabric hands out, each reservation's
network on each fabric, each node's place on every fabric (what it should be on, what was
read back), and each node's private address on its reservation's Ethernet network.

A node is on no tenant's network (Ethernet: the provisioning VLAN; InfiniBand: a limited member
of the default partition only; NVLink: in no partition) unless its attachment names the tenant
network of the reservation it serves. An attachment is `confirmed` only when the fabric's
manager was read back holding exactly what it names.
"""

from __future__ import annotations

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import RangeOperators
from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Cast, Now

from core.topology import ETHERNET, INFINIBAND, NVLINK
from fleet import networks
from fleet.models.nodes import Node
from fleet.segments import PKEYS, VLANS, VNIS


class Fabric(models.TextChoices):
    ETHERNET = ETHERNET
    INFINIBAND = INFINIBAND
    NVLINK = NVLINK


class SegmentKind(models.TextChoices):
    VLAN = "vlan", "VLAN"
    VXLAN = "vxlan", "VXLAN VNI (EVPN)"
    PKEY = "pkey", "InfiniBand P_Key"


SEGMENT_RANGES = {SegmentKind.VLAN: VLANS, SegmentKind.VXLAN: VNIS, SegmentKind.PKEY: PKEYS}


class SegmentPool(models.Model):
    """The numbers one fabric hands to tenants' networks: VLANs or VNIs for Ethernet (one pool,
    stretched over every leaf), P_Keys for each InfiniBand fabric (its `scope`, the pod its UFM
    manages). Operators edit them in the admin; a number a live network holds stays its own."""

    fabric = models.CharField(max_length=16, choices=Fabric.choices)
    scope = models.CharField(max_length=64, blank=True, help_text="InfiniBand: the fabric (pod); blank: every one.")
    kind = models.CharField(max_length=8, choices=SegmentKind.choices)
    first = models.PositiveIntegerField()
    last = models.PositiveIntegerField()

    class Meta:
        ordering = ["fabric", "scope"]
        constraints = [
            models.UniqueConstraint(fields=["fabric", "scope"], name="segment_pool_one_per_fabric_scope"),
            models.CheckConstraint(condition=Q(first__lte=models.F("last")), name="segment_pool_in_order"),
            models.CheckConstraint(
                condition=(
                    Q(fabric=Fabric.ETHERNET, kind__in=[SegmentKind.VLAN, SegmentKind.VXLAN])
                    | Q(fabric=Fabric.INFINIBAND, kind=SegmentKind.PKEY)
                ),
                name="segment_pool_kind_fits_fabric",
            ),
            *(
                models.CheckConstraint(
                    condition=~Q(kind=kind) | Q(first__gte=low, last__lte=high), name=f"segment_pool_{kind}_in_range"
                )
                for kind, (low, high) in SEGMENT_RANGES.items()
            ),
        ]

    def __str__(self) -> str:
        scope = f" {self.scope}" if self.scope else ""
        return f"{self.fabric}{scope}: {self.kind} {self.first}-{self.last}"


class TenantNetwork(models.Model):
    """A reservation's network on one fabric: an Ethernet segment with its subnet, a P_Key on one
    InfiniBand fabric, or a partition in one NVLink domain. Live (`released_at` null) from
    placement until its reservation has ended and no node is left on it."""

    reservation = models.ForeignKey("reservations.Reservation", on_delete=models.PROTECT, related_name="networks")
    fabric = models.CharField(max_length=16, choices=Fabric.choices)
    scope = models.CharField(
        max_length=64, blank=True, help_text="InfiniBand: the fabric (pod); NVLink: the domain; Ethernet: blank."
    )
    kind = models.CharField(max_length=8, choices=SegmentKind.choices, blank=True)
    segment = models.PositiveIntegerField(null=True, blank=True, help_text="The VLAN, VNI or P_Key.")
    vlan = models.PositiveIntegerField(null=True, blank=True, help_text="Ethernet: the VLAN leaf ports are put in.")
    partition = models.CharField(max_length=64, blank=True, help_text="NVLink: the partition's name.")
    subnet = models.CharField(max_length=64, blank=True, help_text="Ethernet: CIDR of the tenant's private network.")
    gateway = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fabric", "scope", "segment"],
                condition=Q(released_at__isnull=True, segment__isnull=False),
                name="tenant_network_segment_once_live",
            ),
            models.UniqueConstraint(
                fields=["fabric", "scope", "partition"],
                condition=Q(released_at__isnull=True) & ~Q(partition=""),
                name="tenant_network_partition_once_live",
            ),
            models.UniqueConstraint(
                fields=["reservation", "fabric", "scope"], name="tenant_network_once_per_reservation_fabric_scope"
            ),
            models.CheckConstraint(
                condition=(
                    Q(fabric=Fabric.ETHERNET, kind__in=[SegmentKind.VLAN, SegmentKind.VXLAN])
                    & Q(segment__isnull=False, vlan__isnull=False, gateway__isnull=False)
                    & ~Q(subnet="")
                    & Q(partition="")
                )
                | (
                    Q(fabric=Fabric.INFINIBAND, kind=SegmentKind.PKEY, segment__isnull=False, vlan__isnull=True)
                    & Q(subnet="", partition="", gateway__isnull=True)
                )
                | (
                    Q(fabric=Fabric.NVLINK, kind="", segment__isnull=True, vlan__isnull=True, gateway__isnull=True)
                    & Q(subnet="")
                    & ~Q(partition="")
                ),
                name="tenant_network_shape_fits_fabric",
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=models.F("created_at")),
                name="tenant_network_released_after_created",
            ),
            models.CheckConstraint(
                condition=Q(vlan__isnull=True) | Q(vlan__gte=VLANS[0], vlan__lte=VLANS[1]),
                name="tenant_network_vlan_in_range",
            ),
            models.CheckConstraint(
                condition=~Q(kind=SegmentKind.VLAN) | Q(segment=models.F("vlan")),
                name="tenant_network_vlan_segment_is_its_vlan",
            ),
            # A VLAN is stretched over every leaf: one live network each, whatever VNI it carries.
            models.UniqueConstraint(
                fields=["vlan"],
                condition=Q(released_at__isnull=True, vlan__isnull=False),
                name="tenant_network_vlan_once_live",
            ),
            ExclusionConstraint(
                name="tenant_network_subnets_apart",
                expressions=[
                    (
                        OpClass(Cast("subnet", output_field=models.GenericIPAddressField()), name="inet_ops"),
                        RangeOperators.OVERLAPS,
                    )
                ],
                index_type="gist",
                condition=Q(released_at__isnull=True) & ~Q(subnet=""),
            ),
        ]

    def __str__(self) -> str:
        return f"reservation {self.reservation_id} {self.fabric} {self.value}"

    @property
    def value(self) -> str:
        """What a member's port reads back as on this network (fleet/networks.py's spelling)."""
        return networks.membership_value(self.fabric, vlan=self.vlan, pkey=self.segment, partition=self.partition)


class NetworkAttachment(models.Model):
    """One node's place on one fabric: the tenant network it should be on (none: no tenant's),
    what its ports were last read back on, and whether that is what it should be.

    On Ethernet, a node on no tenant's network is either on the provisioning VLAN or `isolated`:
    its port in no VLAN at all. A node is isolated from the moment it stops serving until the
    wipe has rebooted it into the service image, and while quarantined or in maintenance: its OS
    may still be its last tenant's, which must reach neither that tenant nor the provisioning
    network where other nodes' agents listen."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="network_attachments")
    fabric = models.CharField(max_length=16, choices=Fabric.choices)
    wanted = models.ForeignKey(
        TenantNetwork, null=True, blank=True, on_delete=models.PROTECT, related_name="attachments"
    )
    found = models.CharField(max_length=256, blank=True, help_text="What its ports were read back on, last time.")
    confirmed = models.BooleanField(default=False, help_text="The last read-back found exactly what it should be on.")
    checked_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(db_default=Now(), help_text="When `wanted` last changed.")
    isolated = models.BooleanField(default=False, help_text="Ethernet: on no VLAN at all, not even provisioning.")
    problem = models.TextField(blank=True, help_text="Why the last change or read failed, while it does.")

    class Meta:
        ordering = ["node_id", "fabric"]
        constraints = [
            models.UniqueConstraint(fields=["node", "fabric"], name="network_attachment_once_per_node_fabric"),
            models.CheckConstraint(
                condition=Q(confirmed=False) | Q(checked_at__isnull=False),
                name="network_attachment_confirmed_when_checked",
            ),
            models.CheckConstraint(
                condition=Q(isolated=False) | Q(fabric=Fabric.ETHERNET, wanted__isnull=True),
                name="network_attachment_isolated_on_no_network",
            ),
        ]
        indexes = [
            models.Index(fields=["fabric", "id"], name="network_attachment_unsure_idx", condition=Q(confirmed=False)),
            # What may owe a sync (services.network_attachments.syncs_owed, hold_reasons): wanted on a
            # network, or maybe left on one. A fleet no fabric manager reads never confirms any
            # attachment, and the reconciler asks every pass: the few such rows, not every one.
            models.Index(
                fields=["id"],
                name="network_attachment_owed_idx",
                condition=Q(confirmed=False)
                & (
                    Q(wanted__isnull=False) | ~Q(found="") | Q(checked_at__isnull=False, checked_at__lt=F("changed_at"))
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.fabric}"


class PrivateAddress(models.Model):
    """A node's address on its reservation's Ethernet network (`private0` on its config drive).

    Its own table, not a column of the node's attachment: the address is handed out as the node's
    config drive is written, before the node joins the network (`wanted` set), and it is unique
    within its network by constraint however many nodes take one at once. A network's addresses
    stay with it: released, it holds them as the record of who had which."""

    network = models.ForeignKey(TenantNetwork, on_delete=models.CASCADE, related_name="private_addresses")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="private_addresses")
    address = models.GenericIPAddressField(protocol="IPv4")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["network_id", "address"]
        constraints = [
            models.UniqueConstraint(fields=["network", "node"], name="private_address_once_per_node_network"),
            models.UniqueConstraint(fields=["network", "address"], name="private_address_unique_in_network"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.address}"
