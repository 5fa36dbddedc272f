"""Real Redfish clients against bmcsim: OpenStack's sushy (what Ironic uses) and DMTF's redfish."""

from __future__ import annotations

import redfish
import sushy

from tests.support.bmcsim import OPERATOR


def test_sushy_manages_a_node_as_ironic_does(bmcsim):
    root = sushy.Sushy(bmcsim.url + "/redfish/v1", username=OPERATOR[0], password=OPERATOR[1])
    try:
        drive_sushy(bmcsim, root)
    finally:
        root._auth.close()  # log out now, not when garbage collection meets a stopped server


def drive_sushy(bmcsim, root: sushy.Sushy) -> None:
    systems = root.get_system_collection()
    assert len(systems.members_identities) == 4
    system = root.get_system("/redfish/v1/Systems/node-002")
    assert system.serial_number == bmcsim.node("node-002")["serial"]

    system.reset_system(sushy.ResetType.FORCE_OFF)
    system.refresh()
    assert system.power_state == sushy.PowerState.OFF
    system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.ON

    system.set_system_boot_options(sushy.BootSource.PXE, enabled=sushy.BootSourceOverrideEnabled.ONCE)
    system.refresh()
    assert system.boot.target == sushy.BootSource.PXE
    assert system.boot.enabled == sushy.BootSourceOverrideEnabled.ONCE

    manager = root.get_manager("/redfish/v1/Managers/node-002")
    cd = manager.virtual_media.get_member("/redfish/v1/Managers/node-002/VirtualMedia/Cd")
    cd.insert_media("http://127.0.0.1:9/deploy.iso", inserted=True, write_protected=True)
    cd.refresh()
    assert cd.image == "http://127.0.0.1:9/deploy.iso" and cd.inserted is True
    cd.eject_media()
    cd.refresh()
    assert cd.image is None and cd.inserted is False

    (storage,) = system.storage.get_members()
    drives = storage.drives
    assert [d.protocol for d in drives] == [sushy.Protocol.NVMe] * 2
    assert all(d.capacity_bytes == 3_840_755_982_336 for d in drives)
    assert {mac.lower() for mac in system.ethernet_interfaces.summary} == set(bmcsim.node("node-002")["macs"])


def test_sushy_reads_processors_bios_secure_boot_and_firmware_as_ironic_does(bmcsim):
    """Ironic's inspection and its BIOS, Secure Boot and firmware interfaces go through these."""
    root = sushy.Sushy(bmcsim.url + "/redfish/v1", username=OPERATOR[0], password=OPERATOR[1])
    system = root.get_system("/redfish/v1/Systems/node-003")
    try:
        raw = bmcsim.get("/redfish/v1/Systems/node-003").json()
        # The GPUs are Processors too, but the summary counts the host's logical processors only.
        summary = system.processors.summary
        assert summary.count == raw["ProcessorSummary"]["LogicalProcessorCount"] == 224
        cpu = bmcsim.get("/redfish/v1/Systems/node-003/Processors/CPU0").json()
        assert summary.architecture == sushy.ProcessorArchitecture(cpu["ProcessorArchitecture"])
        assert len(system.processors.members_identities) == 2 + 8

        bios = system.bios
        assert bios.attributes["SriovGlobalEnable"] == "Enabled" and bios.attributes["BootMode"] == "Uefi"
        bios.set_attributes({"ProcTurboMode": "Disabled"}, apply_time=sushy.ApplyTime.ON_RESET)
        assert bios.pending_attributes == {"ProcTurboMode": "Disabled"}

        secure_boot = system.secure_boot
        assert secure_boot.enabled is False
        assert secure_boot.current_boot == sushy.SecureBootCurrentBoot.DISABLED
        assert secure_boot.mode == sushy.SecureBootMode.USER
        secure_boot.set_enabled(True)

        system.reset_system(sushy.ResetType.FORCE_RESTART)
        system.refresh()
        assert system.bios.attributes["ProcTurboMode"] == "Disabled" and system.bios.pending_attributes == {}
        assert system.secure_boot.current_boot == sushy.SecureBootCurrentBoot.ENABLED

        inventory = root.get_update_service().firmware_inventory
        items = {item.identity: item for item in inventory.get_members()}
        assert len(items) == 4 * (3 + 8)  # the operator sees every node's BIOS, BMC, NIC and VBIOSes
        bios_item = items["node-003-BIOS"]
        assert (bios_item.software_id, bios_item.version, bios_item.updateable) == ("BIOS", raw["BiosVersion"], True)
        assert bios_item.related_item == [{"@odata.id": "/redfish/v1/Systems/node-003"}]
        assert items["node-003-GPU5-VBIOS"].related_item == [
            {"@odata.id": "/redfish/v1/Systems/node-003/Processors/GPU5"}
        ]
    finally:
        system.secure_boot.set_enabled(False)
        system.bios.reset_bios()
        system.reset_system(sushy.ResetType.FORCE_RESTART)
        root._auth.close()
    assert bmcsim.get("/redfish/v1/Systems/node-003/Bios").json()["Attributes"]["ProcTurboMode"] == "Enabled"


def test_dmtf_redfish_client_logs_in_with_a_session(bmcsim):
    client = redfish.redfish_client(base_url=bmcsim.url, username=OPERATOR[0], password=OPERATOR[1])
    client.login(auth="session")
    try:
        assert client.get_session_key()
        response = client.get("/redfish/v1/Systems/node-001")
        assert response.status == 200
        assert response.dict["Id"] == "node-001"
        sessions = client.get("/redfish/v1/SessionService/Sessions").dict["Members"]
        assert client.get_session_location() in [m["@odata.id"] for m in sessions]
    finally:
        client.logout()
    assert (
        bmcsim.get(
            "/redfish/v1/Systems/node-001", auth=None, headers={"X-Auth-Token": client.get_session_key() or "x"}
        ).status_code
        == 401
    )
