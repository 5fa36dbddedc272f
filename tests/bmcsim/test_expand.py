"""$expand as DSP0266 has it: each hyperlink replaced by what a GET of it answers the same caller,
`.` outside Links, `~` inside, `*` both, ($levels=N) deep; advertised in the service root."""

from __future__ import annotations

import time

import pytest

from core.topology import bmc_password

INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
INTEGRITY = "/redfish/v1/ComponentIntegrity"
SYSTEM = "/redfish/v1/Systems/node-001"


def ids(references: list[dict]) -> list[str]:
    return [r["@odata.id"] for r in references]


def is_reference(value: dict) -> bool:
    return set(value) == {"@odata.id"}


def expanded(bmcsim, path: str, value: str, auth=None) -> dict:
    answer = bmcsim.get(path, params={"$expand": value}, **({"auth": auth} if auth else {}))
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_service_root_advertises_every_expand_option(bmcsim):
    features = bmcsim.get("/redfish/v1/", auth=None).json()["ProtocolFeaturesSupported"]
    assert features["ExpandQuery"] == {
        "ExpandAll": True,
        "NoLinks": True,
        "Links": True,
        "Levels": True,
        "MaxLevels": 3,
    }
    assert features["SelectQuery"] is False and features["FilterQuery"] is False


def test_expanding_the_firmware_inventory_gives_each_members_own_get(bmcsim):
    plain = bmcsim.get(INVENTORY).json()
    body = expanded(bmcsim, INVENTORY, ".")
    assert body["Members@odata.count"] == plain["Members@odata.count"] == len(body["Members"])
    assert [m["@odata.id"] for m in body["Members"]] == ids(plain["Members"])
    for member in body["Members"]:
        assert member == bmcsim.get(member["@odata.id"]).json()
        assert all(is_reference(item) for item in member["RelatedItem"])  # one level only
    assert {k: v for k, v in body.items() if k != "Members"} == {k: v for k, v in plain.items() if k != "Members"}


def test_levels_cascade_the_expansion(bmcsim):
    one = expanded(bmcsim, SYSTEM, ".")
    assert one["Processors"] == bmcsim.get(f"{SYSTEM}/Processors").json()
    assert all(is_reference(m) for m in one["Processors"]["Members"])
    two = expanded(bmcsim, SYSTEM, ".($levels=2)")
    assert [m["@odata.id"] for m in two["Processors"]["Members"]] == ids(one["Processors"]["Members"])
    gpu0 = next(m for m in two["Processors"]["Members"] if m["Id"] == "GPU0")
    assert is_reference(gpu0["Certificates"])  # the third level stays a reference
    three = expanded(bmcsim, SYSTEM, ".($levels=3)")
    gpu0 = next(m for m in three["Processors"]["Members"] if m["Id"] == "GPU0")
    assert gpu0["Certificates"] == bmcsim.get(f"{SYSTEM}/Processors/GPU0/Certificates").json()
    # The firmware inventory two deep: each item's RelatedItem becomes the System it names.
    inventory = expanded(bmcsim, INVENTORY, ".($levels=2)")
    bios = next(m for m in inventory["Members"] if m["Id"] == "node-001-BIOS")
    assert bios["RelatedItem"] == [bmcsim.get(SYSTEM).json()]


def test_a_reference_back_to_a_resource_being_expanded_stays_a_reference(bmcsim):
    chassis = expanded(bmcsim, "/redfish/v1/Chassis/node-001", "*($levels=3)")
    system = chassis["Links"]["ComputerSystems"][0]
    assert system["Id"] == "node-001"
    assert system["Links"]["Chassis"] == [{"@odata.id": "/redfish/v1/Chassis/node-001"}]


def test_star_dot_and_tilde_pick_links_or_not(bmcsim):
    member = f"{INTEGRITY}/node-002-GPU3"
    plain = bmcsim.get(member).json()
    manager = bmcsim.get("/redfish/v1/Managers/node-002").json()
    certificate = bmcsim.get("/redfish/v1/Systems/node-002/Processors/GPU3/Certificates/CertChain").json()
    processor = bmcsim.get("/redfish/v1/Systems/node-002/Processors/GPU3").json()

    def parts(body: dict) -> tuple:
        authentication = body["SPDM"]["IdentityAuthentication"]["ResponderAuthentication"]
        return body["SPDM"]["Requester"], authentication["ComponentCertificate"], body["Links"]["ComponentsProtected"]

    assert parts(expanded(bmcsim, member, ".")) == (manager, certificate, plain["Links"]["ComponentsProtected"])
    assert parts(expanded(bmcsim, member, "~")) == (*parts(plain)[:2], [processor])
    assert parts(expanded(bmcsim, member, "*")) == (manager, certificate, [processor])


def test_a_bmc_credential_expands_only_what_it_may_read(bmcsim):
    own = ("admin", bmc_password("node-002"))
    body = expanded(bmcsim, INTEGRITY, ".", auth=own)
    assert [m["Id"] for m in body["Members"]] == [f"node-002-GPU{i}" for i in range(8)]
    for member in body["Members"]:
        assert member == bmcsim.get(member["@odata.id"], auth=own).json()
    inventory = expanded(bmcsim, INVENTORY, ".", auth=own)
    assert len(inventory["Members"]) == 11 and all(m["Id"].startswith("node-002-") for m in inventory["Members"])
    # From the root, two deep: the Systems collection holds its own System only.
    root = expanded(bmcsim, "/redfish/v1/", ".($levels=2)", auth=own)
    assert [s["Id"] for s in root["Systems"]["Members"]] == ["node-002"]
    assert root["Fabrics"]["Members"] == []


def test_what_a_get_would_refuse_stays_a_reference(bmcsim):
    # No credentials: the root is public, nothing it links to is.
    root = bmcsim.get("/redfish/v1/", auth=None, params={"$expand": "*"}).json()
    assert root == bmcsim.get("/redfish/v1/", auth=None).json()
    # A BMC answering 500: its members stay references, the others are expanded.
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_error"})
    body = expanded(bmcsim, INTEGRITY, ".")
    by_node = {m["@odata.id"]: m for m in body["Members"]}
    assert all(is_reference(m) for uri, m in by_node.items() if "/node-002-" in uri)
    assert all(m["ComponentIntegrityType"] == "SPDM" for uri, m in by_node.items() if "/node-002-" not in uri)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "QueryParameterValueFormatError"),
        ("Members", "QueryParameterValueFormatError"),
        ("", "QueryParameterValueFormatError"),
        (".($levels=)", "QueryParameterValueFormatError"),
        (".($levels=2", "QueryParameterValueFormatError"),
        ("*($levels=-1)", "QueryParameterValueFormatError"),
        (".($top=2)", "QueryParameterValueFormatError"),
        (".($levels=0)", "QueryParameterOutOfRange"),
        ("~($levels=4)", "QueryParameterOutOfRange"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_parameter(bmcsim, value, message):
    answer = bmcsim.get(INVENTORY, params={"$expand": value})
    assert answer.status_code == 400, answer.text
    info = answer.json()["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageId"] == f"Base.1.18.{message}"
    assert info["MessageArgs"][:2] == [value, "$expand"]


def test_the_parameter_is_read_as_clients_write_it(bmcsim):
    raw = bmcsim.get(f"{SYSTEM}?$expand=.($levels=2)")
    assert raw.status_code == 200 and raw.json() == expanded(bmcsim, SYSTEM, ".($levels=2)")
    twice = bmcsim.get(f"{SYSTEM}?$expand=.&$expand=*")
    assert twice.status_code == 400
    head = bmcsim.request("HEAD", f"{SYSTEM}?$expand=.")
    assert head.status_code == 200
    assert int(head.headers["Content-Length"]) == len(bmcsim.get(f"{SYSTEM}?$expand=.").content)


def test_one_request_replaces_a_get_per_member(bmcsim):
    own = ("admin", bmc_password("node-003"))
    path = f"{INTEGRITY}?$expand=."
    members = ids(bmcsim.get(INTEGRITY, auth=own).json()["Members"])
    assert len(members) == 8

    def one_request() -> float:
        start = time.perf_counter()
        assert bmcsim.get(path, auth=own).status_code == 200
        return time.perf_counter() - start

    def get_per_member() -> float:
        start = time.perf_counter()
        for member in members:
            assert bmcsim.get(member, auth=own).status_code == 200
        return time.perf_counter() - start

    assert min(one_request() for _ in range(3)) < min(get_per_member() for _ in range(3))
