"""A node's NoCloud config drive: the ISO 9660 image cloud-init reads at first boot.

cloud-init's NoCloud source finds a filesystem labelled CIDATA with three files: `meta-data`
(the instance id, the host name and the tenant's SSH public keys), `user-data` (the tenant's
own, passed through untouched: a cloud-config document or a script) and `network-config`
(version 2: the node's address on the tenant network). The names are Rock Ridge and Joliet
names, so Linux and cloud-init see them as written.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv6Interface

import pycdlib
import yaml

VOLUME_LABEL = "CIDATA"
# ISO 9660 level-1 names beside the Rock Ridge and Joliet ones.
FILES = {"meta-data": "/METADATA.;1", "user-data": "/USERDATA.;1", "network-config": "/NETWORK.;1"}


@dataclass(frozen=True)
class NoCloudConfig:
    instance_id: str
    hostname: str
    ssh_public_keys: tuple[str, ...]
    user_data: str
    interface: IPv4Interface | IPv6Interface | None  # the node's address and prefix; None: DHCP
    gateway: str | None
    mac: str | None  # the NIC the address goes on; the first NIC if None

    def documents(self) -> dict[str, bytes]:
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
        network = {"version": 2, "ethernets": {"tenant0": ethernet}}
        return {
            "meta-data": yaml.safe_dump(meta_data, sort_keys=False).encode(),
            "user-data": self.user_data.encode(),
            "network-config": yaml.safe_dump(network, sort_keys=False).encode(),
        }

    def iso(self) -> bytes:
        image = pycdlib.PyCdlib()
        image.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL)
        for name, content in self.documents().items():
            image.add_fp(io.BytesIO(content), len(content), FILES[name], rr_name=name, joliet_path=f"/{name}")
        out = io.BytesIO()
        image.write_fp(out)
        image.close()
        return out.getvalue()
