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
