"""What cloud-init reads from a node's NoCloud config drive at first boot.

cloud-init's NoCloud source finds a filesystem labelled CIDATA (fleet/nocloud.py writes it) with
three files: `meta-data` (the instance id, the host name and the tenant's SSH public keys),
`user-data` (the tenant's own, passed through untouched: a cloud-config document or a script)
and `network-config` (version 2: the node's address on the tenant network, and on its
reservation's private network where it has one, the ethernet named `private0`). The service
image's drive has meta-data and an empty user-data only. Beside them, every drive carries the
agent's credentials of that boot or tenancy, added as the drive is served (fleet/agent_credentials.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv6Interface

import yaml


@dataclass(frozen=True)
class NoCloudConfig:
    instance_id: str
    hostname: str
    ssh_public_keys: tuple[str, ...]
    user_data: str
    interface: IPv4Interface | IPv6Interface | None  # the node's address and prefix; None: DHCP
    gateway: str | None
    mac: str | None  # the NIC the address goes on; the first NIC if None
    # The node's address on its reservation's private network (fleet/services/tenant_networks.py):
    # the ethernet `private0`, with no default route (tenant0 keeps it). None: on none.
    private_interface: IPv4Interface | None = None

    def documents(self) -> dict[str, str]:
        meta_data = {
            "instance-id": self.instance_id,
            "local-hostname": self.hostname,
            "public-keys": list(self.ssh_public_keys),
        }
        ethernet: dict[str, object] = {"addresses": [str(self.interface)]} if self.interface else {"dhcp4": True}
        if self.mac:
            ethernet["match"] = {"macaddress": self.mac}
            ethernet["set-name"] = "tenant0"
        else:
            ethernet["match"] = {"name": "e*"}
        if self.gateway and self.interface:
            default = "::/0" if self.interface.version == 6 else "0.0.0.0/0"
            ethernet["routes"] = [{"to": default, "via": self.gateway}]
        ethernets = {"tenant0": ethernet}
        if self.private_interface:
            ethernets["private0"] = {"addresses": [str(self.private_interface)]}
        network = {"version": 2, "ethernets": ethernets}
        return {
            "meta-data": yaml.safe_dump(meta_data, sort_keys=False),
            "user-data": self.user_data,
            "network-config": yaml.safe_dump(network, sort_keys=False),
        }


def service_documents(*, instance_id: str, hostname: str) -> dict[str, str]:
    """The service image's drive: who it is, and no user data; its network is its own."""
    meta_data = {"instance-id": instance_id, "local-hostname": hostname}
    return {"meta-data": yaml.safe_dump(meta_data, sort_keys=False), "user-data": ""}
