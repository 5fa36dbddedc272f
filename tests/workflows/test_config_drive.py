"""The NoCloud config drive, read back as cloud-init would: an ISO 9660 image labelled CIDATA with
meta-data, user-data and network-config under their own names."""

from __future__ import annotations

import io
from ipaddress import IPv4Interface, ip_interface

import pycdlib
import yaml

from fleet import nocloud
from workflows.config_drive import NoCloudConfig

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdPNlSYmCGJxnLpo8YQaeR8TcqIC3qVc4sUVBn2jGqP alice@laptop"


def read(iso: bytes) -> tuple[str, dict[str, bytes]]:
    image = pycdlib.PyCdlib()
    image.open_fp(io.BytesIO(iso))
    files = {}
    for name in ("meta-data", "user-data", "network-config"):
        out = io.BytesIO()
        image.get_file_from_iso_fp(out, rr_path=f"/{name}")
        files[name] = out.getvalue()
    label = image.pvd.volume_identifier.decode().strip()
    image.close()
    return label, files


def test_the_drive_holds_the_three_nocloud_files_under_the_cidata_label():
    drive = NoCloudConfig(
        instance_id="node-007-r42",
        hostname="node-007",
        ssh_public_keys=(KEY,),
        user_data="#!/bin/sh\necho hello > /tmp/hello\n",
        interface=ip_interface("10.100.0.7/24"),
        gateway="10.100.0.1",
        mac="02:aa:bb:cc:dd:01",
    )
    label, files = read(nocloud.iso(drive.documents()))
    assert label == "CIDATA"
    assert yaml.safe_load(files["meta-data"]) == {
        "instance-id": "node-007-r42",
        "local-hostname": "node-007",
        "public-keys": [KEY],
    }
    assert files["user-data"] == b"#!/bin/sh\necho hello > /tmp/hello\n"  # the tenant's, untouched
    network = yaml.safe_load(files["network-config"])
    assert network == {
        "version": 2,
        "ethernets": {
            "tenant0": {
                "addresses": ["10.100.0.7/24"],
                "match": {"macaddress": "02:aa:bb:cc:dd:01"},
                "set-name": "tenant0",
                "routes": [{"to": "0.0.0.0/0", "via": "10.100.0.1"}],
            }
        },
    }


def test_an_ipv6_address_without_a_gateway_or_a_known_nic():
    drive = NoCloudConfig("i", "node-1", (), "", ip_interface("fd00:100::7/64"), None, None)
    _, files = read(nocloud.iso(drive.documents()))
    ethernet = yaml.safe_load(files["network-config"])["ethernets"]["tenant0"]
    assert ethernet == {"addresses": ["fd00:100::7/64"], "match": {"name": "e*"}}
    assert yaml.safe_load(files["meta-data"])["public-keys"] == []


def test_a_private_address_is_the_ethernet_private0_without_a_default_route():
    tenant, private = ip_interface("10.100.0.7/24"), IPv4Interface("10.128.0.2/24")
    drive = NoCloudConfig("i", "node-1", (), "", tenant, "10.100.0.1", None, private_interface=private)
    _, files = read(nocloud.iso(drive.documents()))
    ethernets = yaml.safe_load(files["network-config"])["ethernets"]
    assert list(ethernets) == ["tenant0", "private0"]  # the tenant network's first: the address a node is reached at
    assert ethernets["private0"] == {"addresses": ["10.128.0.2/24"]}
    assert ethernets["tenant0"]["routes"] == [{"to": "0.0.0.0/0", "via": "10.100.0.1"}]


def test_no_private_address_no_private0():
    drive = NoCloudConfig("i", "node-1", (), "", ip_interface("10.100.0.7/24"), None, None)
    assert "private0" not in drive.documents()["network-config"]
