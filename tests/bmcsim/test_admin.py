"""bmcsim's own API: the inventory agrees with core.topology, trust roots, reference values, faults."""

from __future__ import annotations

import pytest
import requests
from cryptography import x509

from core.topology import bmc_password, default_layout
from tests.support.bmcsim import FLEET_NODES


def test_inventory_is_the_default_topology(bmcsim):
    nodes = bmcsim.get("/bmcsim/v1/inventory", auth=None).json()["nodes"]
    layout = default_layout(FLEET_NODES)
    assert [n["name"] for n in nodes] == [spec.name for spec in layout]
    for node, spec in zip(nodes, layout, strict=True):
        assert (node["pod"], node["rack"], node["position"], node["serial"]) == (
            spec.pod,
            spec.rack,
            spec.position,
            spec.serial,
        )
        assert node["credentials"] == {"username": "admin", "password": bmc_password(spec.name)}
        assert node["redfish_url"] == bmcsim.url and node["system_id"] == spec.name
        assert node["agent_url"] == f"{bmcsim.url}/agent/{spec.name}"
        assert [g["uuid"] for g in node["gpus"]] == [g.uuid for g in spec.gpus]
        assert len(node["macs"]) == 2 and len(set(node["macs"])) == 2
        assert bmcsim.get(f"/redfish/v1/Systems/{node['system_id']}").json()["SerialNumber"] == spec.serial


def test_roots_are_ca_certificates(bmcsim):
    roots = bmcsim.get("/bmcsim/v1/roots").json()
    for name in ("manufacturer_ca", "gpu_vendor_root"):
        cert = x509.load_pem_x509_certificate(roots[name].encode())
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        cert.verify_directly_issued_by(cert)


def test_reference_values_list_every_component(bmcsim):
    manifest = bmcsim.get("/bmcsim/v1/reference-values").json()
    assert set(manifest["boot"]["components"]) == {"firmware", "bootloader", "kernel", "initrd", "cmdline"}
    assert manifest["boot"]["hash_algorithm"] == "sha256" and manifest["gpu"]["hash_algorithm"] == "sha384"
    for releases in (*manifest["boot"]["components"].values(), *manifest["gpu"]["measurements"].values()):
        assert releases and all(r["release"] and r["digest"] for r in releases)


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"node": "node-001", "kind": "meteor"}, 400, "'kind' must be one of"),
        ({"kind": "implant"}, 400, "'node' is required"),
        ({"node": "node-404", "kind": "implant"}, 404, "no node named"),
        ({"node": "node-001", "kind": "xid", "gpu": 8, "xid": 79}, 400, "'gpu' must be"),
        ({"node": "node-001", "kind": "xid", "gpu": True, "xid": 79}, 400, "'gpu' must be"),
        ({"node": "node-001", "kind": "xid", "gpu": 0}, 400, "'xid' must be"),
        ([1, 2], 400, "JSON object"),
    ],
)
def test_fault_requests_are_validated(bmcsim, body, status, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json=body)
    assert r.status_code == status and detail in r.json()["detail"]
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}


def test_faults_are_listed_and_cleared(bmcsim):
    assert bmcsim.post("/bmcsim/v1/faults", data=b"{oops").status_code == 400
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-001", "kind": "implant"})
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "xid", "gpu": 1, "xid": 48})
    assert bmcsim.get("/bmcsim/v1/faults").json()["faults"] == [
        {"node": "node-001", "kind": "implant"},
        {"node": "node-002", "kind": "xid", "gpu": 1, "xid": 48},
    ]
    assert bmcsim.delete("/bmcsim/v1/faults", params={"node": "node-404"}).status_code == 404
    assert bmcsim.delete("/bmcsim/v1/faults", params={"node": "node-001"}).json() == {"cleared": 1}
    assert bmcsim.delete("/bmcsim/v1/faults").json() == {"cleared": 1}
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}
    r = requests.put(bmcsim.url + "/bmcsim/v1/faults", timeout=5)
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}
