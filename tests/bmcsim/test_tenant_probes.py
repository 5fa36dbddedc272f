"""A tenant checks its isolation from inside its nodes, over SSH, as it would on real ones: `ping`,
`ibping` and `nvlink-peers` in the node's sshd answer from the fabric managers' state, which the
fault `fabric_drift` moves as a hand at the switch would. A bmcsim of its own, its tenant nodes
booted as the control plane boots them (an image in the CD, a config drive with the node's
loopback address and its private address, `private0`)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import asyncssh
import pytest
import yaml

from fleet import nocloud
from tests.support.bmcsim import Bmcsim, drive_server, start_bmcsim

FAULTS = "/bmcsim/v1/faults"
# node -> (its sshd's loopback address, its private address); node-004 runs no tenant OS.
TENANT_NODES = {
    "node-001": ("127.63.0.1", "10.128.0.1"),
    "node-002": ("127.63.0.2", "10.128.0.2"),
    "node-003": ("127.63.0.3", "10.128.0.3"),
}
KEY = asyncssh.generate_private_key("ssh-ed25519")


def drive(node: str, address: str, private_address: str) -> bytes:
    """A config drive as the control plane makes one, `private0` first: the sshd still takes tenant0's."""
    network = {
        "version": 2,
        "ethernets": {
            "private0": {"match": {"name": "e*1"}, "addresses": [f"{private_address}/24"]},
            "tenant0": {"match": {"name": "e*0"}, "addresses": [f"{address}/8"]},
        },
    }
    meta_data = {"instance-id": f"{node}-r1", "local-hostname": node, "public-keys": [KEY.export_public_key().decode()]}
    credentials = {"agent_token": secrets.token_urlsafe(32), "report_token": secrets.token_urlsafe(32)}
    return nocloud.iso(
        {
            "meta-data": yaml.safe_dump(meta_data),
            "user-data": "",
            "network-config": yaml.safe_dump(network),
            "gpu-agent.json": json.dumps(credentials),
        }
    )


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[Bmcsim]:
    sim = start_bmcsim(tmp_path_factory.mktemp("tenant-probes") / "data", nodes=8)
    image = sim.get("/bmcsim/v1/images").json()["images"][0]["url"]
    for node, (address, private_address) in TENANT_NODES.items():
        for slot, url in (("Floppy", drive_server().serve(drive(node, address, private_address))), ("Cd", image)):
            inserted = sim.post(
                f"/redfish/v1/Managers/{node}/VirtualMedia/{slot}/Actions/VirtualMedia.InsertMedia", json={"Image": url}
            )
            assert inserted.status_code == 204, inserted.text
        boot = {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}
        assert sim.patch(f"/redfish/v1/Systems/{node}", json={"Boot": boot}).status_code == 200
        sim.reset(node, "ForceRestart")
    yield sim
    sim.stop()


@dataclass(frozen=True)
class Ran:
    exit_status: int | None
    stdout: str
    stderr: str


def run(sim: Bmcsim, node: str, *commands: str) -> list[Ran]:
    """Log in to the node as its tenant and run the commands, one after another."""

    async def session() -> list[Ran]:
        async with asyncssh.connect(
            TENANT_NODES[node][0],
            sim.ssh_port,
            username="tenant",
            client_keys=[KEY],
            known_hosts=None,
            agent_path=None,
            config=None,
            connect_timeout=10,
        ) as connection:
            done = [await connection.run(command) for command in commands]
            return [Ran(ran.exit_status, str(ran.stdout), str(ran.stderr)) for ran in done]

    return asyncio.run(session())


def drift(sim: Bmcsim, fabric: str, node: str, segment: str) -> None:
    r = sim.post(FAULTS, json={"kind": "fabric_drift", "fabric": fabric, "node": node, "segment": segment})
    assert r.status_code == 201, r.text


def network(sim: Bmcsim, node: str) -> dict:
    return sim.node(node)["network"]


def test_ping_reaches_exactly_the_nodes_on_the_same_segment(sim):
    provisioning = network(sim, "node-004")["provisioning_address"]  # its agent's; its port never moves
    drift(sim, "ethernet", "node-001", "10")
    (before,) = run(sim, "node-001", f"ping -c 1 -W 1 {provisioning}")
    assert before.exit_status == 0, "on the provisioning VLAN, an agent answers"

    drift(sim, "ethernet", "node-001", "1001")
    drift(sim, "ethernet", "node-002", "1001")
    drift(sim, "ethernet", "node-003", "1002")
    management = network(sim, "node-002")["management_address"]
    same, other, agent, bmc, itself = run(
        sim,
        "node-001",
        "ping -c 1 -W 1 10.128.0.2",
        "ping -c 1 -W 1 10.128.0.3",
        f"ping -c 1 -W 1 {provisioning}",
        f"ping -c 1 -W 1 {management}",
        "ping -c 1 -W 1 10.128.0.1",
    )
    assert same.exit_status == 0
    assert "64 bytes from 10.128.0.2: icmp_seq=1" in same.stdout
    assert "1 packets transmitted, 1 received, 0% packet loss" in same.stdout
    for unreached in (other, agent, bmc):
        assert unreached.exit_status == 1, unreached.stdout
        assert "1 packets transmitted, 0 received, 100% packet loss" in unreached.stdout
        assert "bytes from" not in unreached.stdout
    assert itself.exit_status == 0
    (back,) = run(sim, "node-003", "ping -c 1 -W 1 10.128.0.1")
    assert back.exit_status == 1


def test_ibping_reaches_a_guid_sharing_a_pkey_with_a_full_member(sim):
    first, second, third = (network(sim, node)["infiniband"]["guids"][0] for node in TENANT_NODES)
    pod = network(sim, "node-001")["infiniband"]["fabric"]
    assert sim.delete(f"/pods/{pod}/ufmRest/resources/pkeys/0x1001").status_code in (200, 204, 404)
    (limited,) = run(sim, "node-001", f"ibping -c 1 -G 0x{second}")
    assert limited.exit_status == 1, "two limited members of the default partition"
    assert "1 packets transmitted, 0 received, 100% packet loss" in limited.stdout

    drift(sim, "infiniband", "node-001", "0x1001")
    drift(sim, "infiniband", "node-002", "0x1001")
    partner, stranger, own = run(
        sim, "node-001", f"ibping -c 1 -G 0x{second}", f"ibping -c 1 -G {third}", f"ibping -c 1 -G {first.upper()}"
    )
    assert partner.exit_status == 0 and f"Pong from 0x{second}" in partner.stdout
    assert stranger.exit_status == 1
    assert own.exit_status == 0


def test_nvlink_peers_lists_the_gpus_in_the_same_partition(sim):
    drift(sim, "nvlink", "node-001", "tenant-a")
    drift(sim, "nvlink", "node-002", "tenant-a")
    drift(sim, "nvlink", "node-003", "tenant-b")
    peers, alone = run(sim, "node-001", "nvlink-peers"), run(sim, "node-003", "nvlink-peers")
    assert peers[0].stdout.splitlines() == [gpu["uuid"] for gpu in sim.node("node-002")["gpus"]]
    assert (alone[0].exit_status, alone[0].stdout) == (0, "")


@pytest.mark.parametrize(
    ("command", "stderr"),
    [
        ("ping 10.128.0.2", "option -c COUNT is required"),
        ("ping -c 1 -f 10.128.0.2", "Usage: ping -c COUNT"),
        ("ping -c 0 10.128.0.2", "out of range"),
        ("ping -c 1 -W soon 10.128.0.2", "invalid argument"),
        ("ping -c 1 10.128.0.2 10.128.0.3", "Usage: ping -c COUNT"),
        ("ping -c 1 -W 1 node-002.example", "node-002.example: Name or service not known"),
        ("ibping -c 1 b8cef60300000000", "Usage: ibping -c COUNT -G GUID"),
        ("ibping -c 1 -G lid-12", "Usage: ibping -c COUNT -G GUID"),
        ("nvlink-peers --all", "Usage: nvlink-peers"),
    ],
)
def test_probes_refuse_what_they_do_not_simulate_with_their_usage(sim, command, stderr):
    (refused,) = run(sim, "node-002", command)
    assert refused.exit_status == 2
    assert stderr in refused.stderr
