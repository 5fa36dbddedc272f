"""Tenant-network addresses: each pod's pools, and the address a serving node holds from one."""

import ipaddress

from django.core.exceptions import ValidationError
from django.db import models

from fleet.models.nodes import Node
from fleet.models.topology import Pod


class AddressPool(models.Model):
    """Tenant-network addresses of a pod's nodes: one per node while it serves a tenant."""

    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="address_pools")
    network = models.CharField(max_length=64, help_text="CIDR, IPv4 or IPv6, e.g. 10.100.1.0/24.")
    gateway = models.GenericIPAddressField(null=True, blank=True)
    ssh_port = models.PositiveIntegerField(default=22, help_text="Where tenants reach their nodes' SSH.")

    class Meta:
        ordering = ["pod__name", "network"]
        constraints = [models.UniqueConstraint(fields=["network"], name="address_pool_network_unique")]

    def __str__(self) -> str:
        return f"{self.pod.name} {self.network}"

    def clean(self) -> None:
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

    def __str__(self) -> str:
        return f"{self.node.name} {self.address}"
