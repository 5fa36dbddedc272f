"""A tenant uses what it reserved: its key, an image and user data in, addresses and host keys out,
and a real SSH login to each node (bmcsim's sshd, an asyncssh client); nothing of it stays after
release. And a node that boots the wrong bytes is wiped and replaced, with no operator."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from io import StringIO

import asyncssh
import pytest
import requests
from django.core.management import call_command
from standardwebhooks import Webhook as Verifier

from fleet.models import AuditEvent, ConfigDrive, Node
from reservations.models import Reservation
from tests.support.api import post, tenant_client
from tests.support.factories import tenant_token
from tests.support.loopback import serving
from tests.support.ports import free_port
from tests.support.processes import wait_for
from tests.support.webhooks import Receiver

WEB_PORT = free_port()
WEB = f"http://127.0.0.1:{WEB_PORT}"
# The BMCs fetch config drives from the web server this test starts; tenants' webhooks may go
# to this host.
PLANE = {"GPUFLEET_CONFIG_DRIVE_BASE_URL": WEB, "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}


def start(bmcsim, control_plane) -> None:
    """What an operator does once (enrol, trust, images, pools), then the control plane's processes."""
    for command in (
        ("seed_fleet", "--bmcsim-url", bmcsim.url),
        ("import_images", f"{bmcsim.url}/bmcsim/v1/images"),
        ("add_address_pool", "p1", "127.100.1.0/24", "--ssh-port", str(bmcsim.ssh_port)),
        ("add_address_pool", "p2", "127.100.2.0/24", "--ssh-port", str(bmcsim.ssh_port)),
    ):
        call_command(*command, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_web(port=WEB_PORT)
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("the fleet attested and available", lambda: Node.objects.filter(state="available").count() >= 20, 180)


def agent_credentials_on_drive(bmcsim, node: str) -> dict[str, str]:
    """gpu-agent.json on the config drive in the node's BMC: what root on the node reads."""
    return json.loads(bmcsim.node_media(node)["Floppy"]["documents"]["gpu-agent.json"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def state_of(reservation_id: int) -> str:
    return Reservation.objects.values_list("state", flat=True).get(pk=reservation_id)


async def run_over_ssh(machine: dict, key, command: str) -> tuple[str, str]:
    """Run `command` on the machine as the tenant would; (output, the host key's fingerprint)."""
    async with asyncssh.connect(
        machine["address"], machine["ssh_port"], username="root", client_keys=[key], known_hosts=None
    ) as connection:
        result = await connection.run(command, check=True)
        host_key = connection.get_server_host_key()
        assert host_key is not None
        return str(result.stdout).strip(), host_key.get_fingerprint("sha256")


def ssh(machine: dict, key, command: str) -> tuple[str, str]:
    return asyncio.run(asyncio.wait_for(run_over_ssh(machine, key, command), 20))


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_tenant_logs_in_to_each_node_with_its_key_and_nothing_stays_after_release(bmcsim, control_plane):
    start(bmcsim, control_plane)
    acme = tenant_client("acme")
    key, strangers_key = asyncssh.generate_private_key("ssh-ed25519"), asyncssh.generate_private_key("ssh-ed25519")
    public = key.export_public_key().decode().strip()
    key_id = post(acme, "/v1/ssh-keys", {"name": "laptop", "public_key": public}).json()["id"]
    rocky = next(i for i in acme.get("/v1/images").json() if i["name"] == "rocky-9")

    created = post(
        acme,
        "/v1/reservations",
        {"node_count": 2, "image": "rocky-9", "ssh_keys": [key_id], "user_data": "#cloud-config\nruncmd: [true]\n"},
    )
    assert created.status_code == 201, created.content
    reservation = created.json()["id"]
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 120)

    machines = acme.get(f"/v1/reservations/{reservation}").json()["machines"]
    assert len(machines) == 2 and len({m["address"] for m in machines}) == 2
    for machine in machines:
        assert machine["address"].startswith("127.100.") and machine["host_key_fingerprint"].startswith("SHA256:")
        hostname, host_key = ssh(machine, key, "hostname")
        assert hostname == machine["name"]
        assert host_key == machine["host_key_fingerprint"]  # the tenant can check it on first login
        assert ssh(machine, key, "cat /etc/gpufleet/image.sha256")[0] == rocky["sha256"]
        with pytest.raises(asyncssh.PermissionDenied):
            ssh(machine, strangers_key, "hostname")
    drive_urls = [
        f"{WEB}/v1/config-drives/{token}"
        for token in ConfigDrive.objects.filter(node__reservation_id=reservation).values_list("token", flat=True)
    ]
    assert [requests.get(url, timeout=10).status_code for url in drive_urls] == [200, 200]
    # Root on each node reads what its drive gave the agent (bmcsim's view of the inserted drive).
    given = {m["name"]: agent_credentials_on_drive(bmcsim, m["name"]) for m in machines}

    assert post(acme, f"/v1/reservations/{reservation}/release", {}).status_code == 200
    names = [m["name"] for m in machines]
    wait_for(
        "both nodes wiped and available",
        lambda: Node.objects.filter(name__in=names, state="available").count() == 2,
        180,
    )
    assert [requests.get(url, timeout=10).status_code for url in drive_urls] == [404, 404]
    for name, secrets in given.items():  # the node now serves the next holder: what the tenant kept opens nothing
        report = {"gpu": 0, "xid": 79, "occurrence": 1, "seen_at": "2026-12-01T00:00:00Z"}
        xids = f"{WEB}/v1/agents/{name}/xids"
        refused = requests.post(xids, json=report, headers=bearer(secrets["report_token"]), timeout=10)
        assert refused.status_code == 401 and set(refused.json()) == {"detail"}
        assert AuditEvent.objects.filter(node__name=name, event="credential_refused").exists()
        inventory = f"{bmcsim.url}/agent/{name}/inventory"
        assert requests.get(inventory, headers=bearer(secrets["agent_token"]), timeout=10).status_code == 401
    for machine in machines:
        with pytest.raises(OSError):  # the tenant OS is gone, its sshd with it
            ssh(machine, key, "hostname")
    assert not Node.objects.filter(name__in=names).exclude(ssh_host_key_fingerprint="").exists()


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_node_that_boots_the_wrong_bytes_is_wiped_and_replaced(bmcsim, control_plane):
    start(bmcsim, control_plane)
    acme = tenant_client("acme")
    first = Node.objects.filter(state="available", rack__pod__name="p2").order_by("name").first()
    assert first is not None
    bmcsim.post("/bmcsim/v1/faults", json={"node": first.name, "kind": "corrupt_media"})

    created = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    assert created["nodes"] == [first.name]  # best fit puts it on the faulty node first
    wait_for("the reservation active on another node", lambda: state_of(created["id"]) == "active", 120)

    failed = AuditEvent.objects.filter(node=first, event="provision_failed").get()
    assert failed.reason.startswith("check_booted_image: booted an image with SHA-256 ")
    assert "not ubuntu-24-04's" in failed.reason
    serving = acme.get(f"/v1/reservations/{created['id']}").json()
    assert [m["name"] for m in serving["machines"]] != [first.name] and len(serving["machines"]) == 1
    assert Node.objects.get(pk=first.pk).state in ("wiping", "inspecting", "available")


class Tenant:
    """A tenant calling the web server over HTTP, as a client would: what it asks of the BMCs goes
    through the web server's broker to the workers."""

    def __init__(self, name: str):
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {tenant_token(name)}"

    def get(self, path: str) -> requests.Response:
        return self.session.get(WEB + path, timeout=30)

    def post(self, path: str, body: dict | None = None) -> requests.Response:
        return self.session.post(WEB + path, json=body or {}, timeout=30)


def boots(bmcsim, node: str) -> int:
    return bmcsim.get(f"/bmcsim/v1/nodes/{node}/power").json()["boot_count"]


@pytest.mark.parametrize("control_plane", [{**PLANE, "GPUFLEET_TENANT_REBOOT_GRACE_SECONDS": "2"}], indirect=True)
def test_a_tenant_reboots_power_cycles_and_reads_the_console_of_its_own_node_only(bmcsim, control_plane, settings):
    start(bmcsim, control_plane)
    acme, globex = Tenant("acme"), Tenant("globex")
    reservation = acme.post("/v1/reservations", {"node_count": 1}).json()["id"]
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 120)
    (node,) = [m["name"] for m in acme.get(f"/v1/reservations/{reservation}").json()["machines"]]
    here = f"/v1/reservations/{reservation}/nodes/{node}"

    booted = boots(bmcsim, node)
    assert acme.post(f"{here}/reboot").status_code == 202
    wait_for("the graceful reboot", lambda: boots(bmcsim, node) == booted + 1, 30)
    assert acme.post(f"{here}/power-cycle").status_code == 202
    wait_for("the power cycle", lambda: boots(bmcsim, node) == booted + 2, 30)

    bmcsim.post("/bmcsim/v1/faults", json={"node": node, "kind": "os_hang"})
    assert acme.post(f"{here}/reboot").status_code == 202
    wait_for("the reboot forced after the grace", lambda: boots(bmcsim, node) == booted + 3, 30)
    # Audited once the BMC has done it: a moment after the boot bmcsim counts.
    forced_rows = AuditEvent.objects.filter(node__name=node, event="power_action", actor="system:power")
    wait_for("the forced reboot audited", forced_rows.exists, 10)
    forced = forced_rows.get()
    assert forced.reason == "reboot forced: no restart within 2s"
    asked = AuditEvent.objects.filter(node__name=node, event="power_action", actor="tenant:acme").order_by("id")
    assert list(asked.values_list("reason", flat=True)) == ["reboot", "power-cycle", "reboot"]

    console = acme.get(f"{here}/console")
    assert console.status_code == 200 and console.headers["Content-Type"].startswith("text/plain")
    assert "-----BEGIN SSH HOST KEY FINGERPRINTS-----" in console.text and f"{node} login:" in console.text

    for path in (f"{here}/console", f"{here}/reboot", f"{here}/power-cycle"):
        call = globex.get if path.endswith("console") else globex.post
        assert call(path).status_code == 404, path
    assert Node.objects.get(name=node).state == "active"


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_tenant_reinstalls_a_node_with_another_image_its_drives_erased_first(bmcsim, control_plane):
    start(bmcsim, control_plane)
    acme = Tenant("acme")
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_id = acme.post("/v1/ssh-keys", {"name": "k", "public_key": key.export_public_key().decode()}).json()["id"]
    reservation = acme.post("/v1/reservations", {"node_count": 1, "ssh_keys": [key_id]}).json()["id"]
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 120)
    (before,) = acme.get(f"/v1/reservations/{reservation}").json()["machines"]
    name = before["name"]
    rocky = next(i for i in acme.get("/v1/images").json() if i["name"] == "rocky-9")
    asked_at = time.time()

    assert acme.post(f"/v1/reservations/{reservation}/nodes/{name}/reinstall", {"image": "windows"}).status_code == 400
    answer = acme.post(f"/v1/reservations/{reservation}/nodes/{name}/reinstall", {"image": "rocky-9"})
    assert answer.status_code == 202, answer.text
    wait_for("the node provisioned again", lambda: Node.objects.filter(name=name, state="active").exists(), 120)
    wait_for("its host key reported", lambda: Node.objects.get(name=name).ssh_host_key_fingerprint != "", 30)

    (after,) = acme.get(f"/v1/reservations/{reservation}").json()["machines"]
    assert after["address"] == before["address"]  # the same node, in the same reservation
    assert after["host_key_fingerprint"] != before["host_key_fingerprint"]  # a new instance
    assert ssh(after, key, "cat /etc/gpufleet/image.sha256")[0] == rocky["sha256"]
    given = agent_credentials_on_drive(bmcsim, name)  # what the reinstalled node's drive gave its agent
    drives = requests.get(
        f"{bmcsim.url}/agent/{name}/inventory", headers=bearer(given["agent_token"]), timeout=10
    ).json()["drives"]
    assert all(d["last_erased_at"] and d["last_erased_at"] >= asked_at for d in drives)
    assert state_of(reservation) == "active"
    again = acme.post(f"/v1/reservations/{reservation}/nodes/{name}/reinstall")
    assert again.status_code == 202
    assert acme.post(f"/v1/reservations/{reservation}/nodes/{name}/reinstall").status_code == 409  # not active now


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    with serving(server):
        yield server


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_reported_node_is_replaced_within_seconds_and_quarantined_with_the_tenants_words(
    bmcsim, control_plane, receiver
):
    start(bmcsim, control_plane)
    acme = Tenant("acme")
    events = ["reservation.degraded", "reservation.healed", "node.quarantined"]
    hook = acme.post("/v1/webhooks", {"url": receiver.url, "events": events}).json()
    reservation = acme.post("/v1/reservations", {"node_count": 2, "pod": "p1"}).json()["id"]
    wait_for("the reservation active", lambda: state_of(reservation) == "active", 120)
    broken, kept = sorted(m["name"] for m in acme.get(f"/v1/reservations/{reservation}").json()["machines"])

    reported = time.monotonic()
    answer = acme.post(f"/v1/reservations/{reservation}/nodes/{broken}/report", {"description": "ECC storm on GPU 2"})
    assert answer.status_code == 202, answer.text

    def replaced() -> bool:
        machines = acme.get(f"/v1/reservations/{reservation}").json()["machines"]
        return state_of(reservation) == "active" and {m["name"] for m in machines} - {kept} not in (set(), {broken})

    wait_for("a replacement active", replaced, 60)
    print(f"report -> replacement active in {time.monotonic() - reported:.1f} s")
    node = Node.objects.get(name=broken)
    assert (node.state, node.quarantine_reason) == ("quarantined", "tenant_report: ECC storm on GPU 2")

    # The tenant was told, by the workers, each message signed with its webhook's secret.
    told: list[str] = []
    while len(told) < 3:
        headers, body = receiver.received.get(timeout=30)
        told.append(Verifier(hook["secret"]).verify(body, headers)["type"])
    assert sorted(told) == sorted(events)
