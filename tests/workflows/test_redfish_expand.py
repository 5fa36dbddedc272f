"""RedfishClient and $expand against bmcsim, which advertises it: a collection and its members
in one GET, the same results as member by member (a client with `expand` off), and a member the
BMC left as a link read by its own GET."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TypeVar

import pytest

from core.topology import bmc_password
from tests.support.bmcsim import OPERATOR, Bmcsim, start_bmcsim
from tests.workflows.test_redfish_component_integrity import failures
from workflows.redfish import BMCAccess, RedfishClient

T = TypeVar("T")
NODE = "node-001"
GPUS = 8
FIRMWARE_ITEMS = 11  # BIOS, BMC, NIC0 and a VBIOS a GPU


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=2)
    yield sim
    sim.stop()


def client_for(sim: Bmcsim, **kwargs) -> RedfishClient:
    return RedfishClient(BMCAccess(NODE, sim.url, NODE, "admin", bmc_password(NODE)), **kwargs)


def calls_of(client: RedfishClient, read: Callable[[], T]) -> tuple[T, int]:
    """What `read()` answers, and the calls it made."""
    before = client.calls
    found = read()
    return found, client.calls - before


def test_the_client_learns_from_the_service_root_once_how_deep_it_may_expand(sim):
    client = client_for(sim)
    assert (client.expand_levels, client.expand_levels, client.calls) == (3, 3, 1)
    # Off, it asks nothing and reads member by member.
    off = client_for(sim, expand=False)
    assert (off.expand_levels, off.calls) == (0, 0)


def test_the_firmware_inventory_in_one_call_is_what_reading_each_item_gives(sim):
    expanding, one_by_one = client_for(sim), client_for(sim, expand=False)
    assert expanding.expand_levels == 3  # the service root, read before what is counted
    inventory, calls = calls_of(expanding, expanding.firmware_inventory)
    assert inventory == one_by_one.firmware_inventory()
    assert calls == 1  # the UpdateService, its FirmwareInventory and each item inline
    assert one_by_one.calls == 2 + FIRMWARE_ITEMS
    assert len(inventory) == FIRMWARE_ITEMS and all("Version" in item for item in inventory)


def test_the_bios_and_secure_boot_in_one_call_are_what_reading_each_gives(sim):
    expanding, one_by_one = client_for(sim), client_for(sim, expand=False)
    assert expanding.expand_levels == 3
    found, calls = calls_of(expanding, expanding.bios_and_secure_boot)
    assert found == one_by_one.bios_and_secure_boot()
    assert calls == 1  # the System, its Bios and SecureBoot inline
    assert one_by_one.calls == 3  # the System (where its Bios and SecureBoot are), then each
    assert found[0] and found[1]["SecureBootEnable"] in (True, False)


def test_the_media_devices_are_what_reading_each_gives(sim):
    expanding, one_by_one = client_for(sim), client_for(sim, expand=False)
    assert expanding.expand_levels == 3
    devices, calls = calls_of(expanding, expanding.virtual_media)
    manager = f"/redfish/v1/Managers/{NODE}/VirtualMedia"
    assert devices == one_by_one.virtual_media() == [f"{manager}/Cd", f"{manager}/Floppy"]
    assert calls == 3  # the System (its Manager), the Manager, its VirtualMedia with each device inline
    assert one_by_one.calls == 5  # the same, then each of the two devices


def test_the_drives_are_what_reading_each_storage_gives(sim):
    expanding, one_by_one = client_for(sim), client_for(sim, expand=False)
    assert expanding.expand_levels == 3
    drives, calls = calls_of(expanding, expanding.drives)
    assert drives == one_by_one.drives() == [f"/redfish/v1/Systems/{NODE}/Storage/1/Drives/{i}" for i in (0, 1)]
    assert calls == 2  # the System, its Storage with each member inline
    assert one_by_one.calls == 3  # the System, its Storage, its one member


def test_the_gpus_evidence_in_two_calls_and_one_action_a_gpu_is_what_reading_each_gives(sim):
    expanding, one_by_one, nonce = client_for(sim), client_for(sim, expand=False), secrets.token_bytes(32)
    assert expanding.expand_levels == 3
    evidence, calls = calls_of(expanding, lambda: expanding.gpu_spdm_evidence(nonce))
    assert calls == 2 + GPUS  # the members with their certificates, the Processors, then each action
    read_alone = one_by_one.gpu_spdm_evidence(nonce)
    assert one_by_one.calls == 1 + 4 * GPUS  # the collection; each member, Processor, action, certificate
    # A report is signed afresh each time: the same GPUs, UUIDs and chains, and both verify.
    assert [{k: v for k, v in e.items() if k != "report"} for e in evidence] == [
        {k: v for k, v in e.items() if k != "report"} for e in read_alone
    ]
    assert len(evidence) == GPUS and all(e["source"] == "out_of_band" for e in evidence)
    assert all(failures(sim, entry, nonce) == set() for entry in [*evidence, *read_alone])


def test_a_member_the_bmc_left_as_a_link_is_read_by_its_own_get(sim):
    """The operator's inventory has node-002's items, which a failing node-002 BMC leaves as links in
    the expanded answer; read by their own GETs, retried once the fault is cleared, they are there."""
    one_by_one = RedfishClient(BMCAccess(NODE, sim.url, NODE, *OPERATOR), expand=False)
    whole = one_by_one.firmware_inventory()

    def clear_the_fault(seconds: float) -> None:
        assert sim.delete("/bmcsim/v1/faults?node=node-002").status_code == 200

    expanding = RedfishClient(BMCAccess(NODE, sim.url, NODE, *OPERATOR), sleep=clear_the_fault)
    assert expanding.expand_levels == 3
    assert sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_error"}).status_code == 201
    try:
        inventory, calls = calls_of(expanding, expanding.firmware_inventory)
    finally:
        sim.delete("/bmcsim/v1/faults?node=node-002")
    assert inventory == whole and len(whole) == 2 * FIRMWARE_ITEMS
    # The expanded UpdateService, then node-002's items: the first twice (500, then 200).
    assert calls == 1 + 1 + FIRMWARE_ITEMS
