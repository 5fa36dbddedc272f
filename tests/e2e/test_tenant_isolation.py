"""Isolation proven to the tenants, from inside their nodes: with real workers, beat, bmcsim's NVUE,
UFM and NMX-M and its sshd, two tenants share a leaf and an NVLink domain, and over SSH on every
node of both the reachability matrix is exactly "its own reservation yes, everything else no" on
each fabric (private addresses, provisioning addresses where the agents listen, management
addresses, idle nodes, every HCA port GUID, NVLink peers). A release while NVUE is down holds the
nodes before their wipe (network_cleanup_pending); once NVUE is back, the removal is read back
before the wipe's first boot, and a node whose wipe is then held (its BMC answers 500, so its
tenant OS still runs) reaches nothing but itself; the other tenant's matrix is unchanged.

bmcsim's 8 nodes: one pod p1, racks r01 and r02 (two NVLink domains) under one leaf p1-leaf1.
acme holds 5 of them (so both racks), globex 2: they share a rack whichever way placement goes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from io import StringIO

import asyncssh
import pytest
from django.core.management import call_command

from core.topology import ETHERNET
from fleet.models import AuditEvent, AuditOnlyEvent, Node
from fleet.services.network_attachments import hold_reasons, removal_pending
from fleet.workflow_steps import StepName
from reservations.models import Reservation
from tests.support.api import post, tenant_client
from tests.support.invariants import check_all
from tests.support.processes import wait_for

SMALL = {"nodes": 8, "pods": 1, "nodes_per_rack": 4, "racks_per_leaf": 2}
FAST_SYNC = {"GPUFLEET_FABRIC_SYNC_SECONDS": "1"}
# Off its tenant's networks, its port on no VLAN at all until the wipe has rebooted it.
REMOVED_MEMBERSHIPS = {"ethernet": "", "infiniband": "", "nvlink": ""}


@dataclass(frozen=True)
class Reach:
    """What one node reaches of the fleet: addresses that answer ping, GUIDs that answer ibping,
    and the GPUs nvlink-peers lists."""

    addresses: frozenset[str]
    guids: frozenset[str]
    nvlink_peers: frozenset[str]


@dataclass(frozen=True)
class Holding:
    """A tenant's reservation as its tenant sees it, and the key it logs in with."""

    tenant: str
    reservation: int
    key: asyncssh.SSHKey
    machines: dict[str, dict]  # by node name: address, ssh_port, private_address

    @property
    def private_addresses(self) -> set[str]:
        return {m["private_address"] for m in self.machines.values()}


def start(bmcsim, control_plane) -> None:
    """What an operator does once (enrol, trust, images, a pool of addresses the tenants log in at),
    then the workers and beat."""
    for command in (
        ("seed_fleet", "--bmcsim-url", bmcsim.url),
        ("import_images", f"{bmcsim.url}/bmcsim/v1/images"),
        ("add_address_pool", "p1", "127.100.1.0/24", "--ssh-port", str(bmcsim.ssh_port)),
    ):
        call_command(*command, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == SMALL["nodes"], 240)


def reserve(tenant: str, nodes: int) -> tuple[int, asyncssh.SSHKey]:
    client = tenant_client(tenant)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_id = post(client, "/v1/ssh-keys", {"name": "laptop", "public_key": key.export_public_key().decode()}).json()
    answer = post(client, "/v1/reservations", {"node_count": nodes, "ssh_keys": [key_id["id"]]})
    assert answer.status_code == 201, answer.content
    return answer.json()["id"], key


def holding(tenant: str, reservation: int, key: asyncssh.SSHKey) -> Holding:
    machines = tenant_client(tenant).get(f"/v1/reservations/{reservation}").json()["machines"]
    assert all(m["address"] and m["private_address"] for m in machines), machines
    return Holding(tenant, reservation, key, {m["name"]: m for m in machines})


def state_of(reservation: int) -> str:
    return Reservation.objects.values_list("state", flat=True).get(pk=reservation)


async def probe(machine: dict, key: asyncssh.SSHKey, addresses: list[str], guids: list[str]) -> Reach:
    """Log in to the machine as its tenant and probe every address and GUID, as root on it would."""
    async with asyncssh.connect(
        machine["address"], machine["ssh_port"], username="root", client_keys=[key], known_hosts=None
    ) as connection:
        pings = [connection.run(f"ping -c 1 -W 1 {address}") for address in addresses]
        ibpings = [connection.run(f"ibping -c 1 -G {guid}") for guid in guids]
        *answers, peers = await asyncio.gather(*pings, *ibpings, connection.run("nvlink-peers", check=True))
    for answer in answers:
        assert answer.exit_status in (0, 1), (answer.command, answer.exit_status, answer.stderr)
    reached = [target for target, answer in zip([*addresses, *guids], answers, strict=True) if answer.exit_status == 0]
    return Reach(
        addresses=frozenset(reached) & frozenset(addresses),
        guids=frozenset(reached) & frozenset(guids),
        nvlink_peers=frozenset(str(peers.stdout).split()),
    )


def reach_of(holding: Holding, name: str, addresses: list[str], guids: list[str]) -> Reach:
    return asyncio.run(asyncio.wait_for(probe(holding.machines[name], holding.key, addresses, guids), 60))


@pytest.mark.parametrize("bmcsim", [SMALL], indirect=True)
@pytest.mark.parametrize("control_plane", [FAST_SYNC], indirect=True)
def test_each_tenant_reaches_its_own_nodes_only_and_a_released_node_nothing_of_them(bmcsim, control_plane):
    start(bmcsim, control_plane)
    inventory = {n["name"]: n for n in bmcsim.get("/bmcsim/v1/inventory").json()["nodes"]}
    acme_id, acme_key = reserve("acme", 5)
    globex_id, globex_key = reserve("globex", 2)
    wait_for("both reservations active", lambda: {state_of(acme_id), state_of(globex_id)} == {"active"}, 180)
    acme, globex = holding("acme", acme_id, acme_key), holding("globex", globex_id, globex_key)

    racks = {t.tenant: {inventory[name]["rack"] for name in t.machines} for t in (acme, globex)}
    assert racks["acme"] & racks["globex"], racks  # one NVLink domain holds nodes of both
    assert len({n["network"][ETHERNET]["switch"] for n in inventory.values()}) == 1  # and one leaf all
    idle = set(inventory) - set(acme.machines) - set(globex.machines)
    assert idle  # nodes on the provisioning VLAN, booted or not

    addresses = sorted(
        {*acme.private_addresses, *globex.private_addresses}
        | {n["network"]["provisioning_address"] for n in inventory.values()}
        | {n["network"]["management_address"] for n in inventory.values()}
    )
    guids = sorted(g for n in inventory.values() for g in n["network"]["infiniband"]["guids"])

    def expected(own: Holding, name: str) -> Reach:
        """Its own reservation's private addresses and GUIDs, itself, and the GPUs of its own
        reservation's other nodes in its NVLink domain: nothing else."""
        itself = inventory[name]["network"]["provisioning_address"]  # a node reaches its own addresses
        return Reach(
            addresses=frozenset(own.private_addresses | {itself}),
            guids=frozenset(g for peer in own.machines for g in inventory[peer]["network"]["infiniband"]["guids"]),
            nvlink_peers=frozenset(
                gpu["uuid"]
                for peer in own.machines
                if peer != name and inventory[peer]["rack"] == inventory[name]["rack"]
                for gpu in inventory[peer]["gpus"]
            ),
        )

    reaches = {name: reach_of(t, name, addresses, guids) for t in (acme, globex) for name in t.machines}
    assert reaches == {name: expected(t, name) for t in (acme, globex) for name in t.machines}

    # The release, NVUE down: every node is held at the wipe's first step, its tenant's networks
    # not yet left on Ethernet, out of placement. Its BMC answers 500, so once NVUE is back and the
    # removal is read back, its wipe stops at its first BMC call: the tenant OS still runs.
    assert bmcsim.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": ETHERNET}).ok
    for name in acme.machines:
        assert bmcsim.post("/bmcsim/v1/faults", json={"node": name, "kind": "bmc_error"}).ok
    before_release = AuditEvent.objects.latest("id").id
    released = tenant_client("acme").post(f"/v1/reservations/{acme_id}/release")
    assert released.status_code == 200, released.content
    ids = set(Node.objects.filter(name__in=acme.machines).values_list("pk", flat=True))

    def at_step(step: StepName) -> bool:
        return all(n.state == "wiping" and n.step == step for n in Node.objects.filter(pk__in=ids))

    wait_for("every released node held at leave_tenant_networks", lambda: at_step(StepName.LEAVE_TENANT_NETWORKS), 60)
    assert set(hold_reasons(ids)) == ids
    assert all(reason.startswith("network_cleanup_pending: ethernet: ") for reason in hold_reasons(ids).values())

    assert bmcsim.delete("/bmcsim/v1/faults?fabric=ethernet").ok
    wait_for("every released node's wipe at its first boot", lambda: at_step(StepName.BOOT_SERVICE_IMAGE), 60)
    assert not any(removal_pending(node_id=pk) for pk in ids) and hold_reasons(ids) == {}
    released_reach = {name: reach_of(acme, name, addresses, guids) for name in acme.machines}
    for name in globex.machines:
        assert reach_of(globex, name, addresses, guids) == reaches[name], name

    for pk in ids:  # the removal was read back before the wipe's first boot
        rows = AuditEvent.objects.filter(node_id=pk, id__gt=before_release).order_by("id")
        removal = rows.filter(event=AuditOnlyEvent.NETWORKS_CONFIRMED, detail__memberships=REMOVED_MEMBERSHIPS).first()
        boot = rows.filter(event=AuditOnlyEvent.STEP_CHANGED, reason=StepName.BOOT_SERVICE_IMAGE).first()
        assert removal is not None and boot is not None and removal.id < boot.id, (removal, boot)

    assert bmcsim.delete("/bmcsim/v1/faults").ok
    assert tenant_client("globex").post(f"/v1/reservations/{globex_id}/release").status_code == 200
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == SMALL["nodes"], 120)
    assert check_all() == []

    # Off its tenant's networks, before its wipe: a released node reaches itself and nothing else,
    # neither its former peers (their tenant OS still up) nor any agent on the provisioning network.
    itself = {
        name: Reach(
            addresses=frozenset({inventory[name]["network"]["provisioning_address"], machine["private_address"]}),
            guids=frozenset(inventory[name]["network"]["infiniband"]["guids"]),
            nvlink_peers=frozenset(),
        )
        for name, machine in acme.machines.items()
    }
    beyond = {name: sorted(reach.addresses - itself[name].addresses) for name, reach in released_reach.items()}
    assert released_reach == itself, f"released nodes reach, besides themselves, before their wipe: {beyond}"
