"""The demo's chaos service: the four incidents that must play out with no operator.

1. acme reserves 12 nodes in p2; after a while XID 79 strikes GPU 3 of one of them. The
   metrics -> Prometheus -> Alertmanager -> webhook path quarantines it and a replacement in
   p2 brings acme's reservation back to active.
2. A tenant leaves an implant in the kernel image and releases its node. The wipe cannot remove
   it; re-inspection's attestation fails and the node is quarantined before anyone gets it. Then
   a tenant changes the VBIOS of one of its node's GPUs (gpu_measurement_tamper), in a way the
   firmware inventory does not show, and releases it: the GPU's own signed measurements, read
   through the BMC whatever the node's OS says, name the changed block, and the node is
   quarantined too.
3. A tenant replaces its node's BMC firmware (firmware_tamper) and releases the node. The wipe
   succeeds; inspection finds the BMC off its firmware baseline, reflashes it, reads it again, and
   the node comes back available, its firmware check naming the BMC repaired. Played only where a
   baseline applies (manage.py set_firmware_baseline; make demo sets one).
4. A tenant with root on its node probes its neighbours: over SSH, as any tenant would, eve's node
   pings acme's nodes on their private and provisioning addresses (nothing answers) and its own
   private address (it answers). Then someone moves eve's switch port into acme's VLAN by hand
   (fabric_drift); the fabric syncer finds it at its next read-back and puts it back, audited as
   fabric_drift_repaired, and the window it was open is said. The probes need eve's node to have an
   address to reach (manage.py add_address_pool) and an image to boot (manage.py import_images).
With --churn, tenants keep reserving and releasing in the background afterwards.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import asyncssh
import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from attestation.models import AttestationResult
from core import clock
from fleet import selectors
from fleet.lifecycle import Event, State
from fleet.models import AuditEvent, AuditOnlyEvent, Node, Pod
from fleet.network_selectors import private_addresses, reservation_networks
from reservations import services as reservations
from reservations.models import LIVE_STATES, Reservation, ReservationState, SSHKey, Tenant
from reservations.placement import PlacementRefused
from reservations.selectors import reservation_machines

ACME_NODES = 12
PROBE_TIMEOUT_S = 60  # one SSH login and every ping at once, each waiting a second at most
CHURN_TENANTS = ["globex", "initech", "umbrella"]


class Command(BaseCommand):
    help = __doc__.splitlines()[0]

    def add_arguments(self, parser):
        parser.add_argument("--pause", type=float, default=30, help="Seconds between the acts of the demo.")
        parser.add_argument("--timeout", type=float, default=900, help="How long to wait for the fleet at most.")
        parser.add_argument("--churn", action="store_true", help="Keep reserving and releasing afterwards.")
        parser.add_argument("--bmcsim-url", default=settings.BMCSIM_URL)

    def handle(self, *args, pause, timeout, churn, bmcsim_url, **options):
        self.bmcsim_url = bmcsim_url.rstrip("/")
        self.timeout = timeout
        self.say("waiting for the fleet to be inspected and attested")
        self.wait("enough available nodes in p2", lambda: self.available("p2") >= ACME_NODES)

        acme = self.tenant("acme")
        reservation = Reservation.objects.filter(tenant=acme, state__in=LIVE_STATES).first() or self.reserve(
            acme, ACME_NODES, pod="p2"
        )
        self.wait("acme's reservation active", lambda: self.state(reservation) == ReservationState.ACTIVE)
        self.say(f"acme holds {ACME_NODES} nodes in p2 (reservation {reservation.pk}); incident 1 in {pause:g} s")
        time.sleep(pause)

        victim = Node.objects.filter(reservation=reservation, state="active").order_by("name").first()
        if victim is None:
            raise CommandError(f"acme's reservation {reservation.pk} holds no active node to strike")
        self.fault({"node": victim.name, "kind": "xid", "gpu": 3, "xid": 79})
        self.say(f"incident 1: XID 79 on GPU 3 of {victim.name}: a reboot, then a power cycle, cannot bring it back")
        self.wait(f"{victim.name} quarantined", lambda: self.node_state(victim) == "quarantined")
        self.wait("acme's reservation healed", lambda: self.state(reservation) == ReservationState.ACTIVE)
        self.say(f"incident 1 over: {victim.name} quarantined, acme back to {ACME_NODES} active nodes")
        time.sleep(pause)

        mallory = self.tenant("mallory")
        tampered = self.reserve(mallory, 1)
        self.wait("mallory's node active", lambda: self.state(tampered) == ReservationState.ACTIVE)
        implanted = Node.objects.get(reservation=tampered)
        self.fault({"node": implanted.name, "kind": "implant"})
        reservations.release_reservation(reservation_id=tampered.pk, actor="tenant:mallory")
        self.say(f"incident 2: mallory left an implant in {implanted.name}'s kernel and released it")
        self.wait(f"{implanted.name} quarantined", lambda: self.node_state(implanted) == "quarantined")
        self.say(f"incident 2 over: {Node.objects.get(pk=implanted.pk).quarantine_reason[:160]}")
        time.sleep(pause)
        self.gpu_implant_incident(mallory)
        time.sleep(pause)

        self.firmware_incident(mallory)
        time.sleep(pause)

        self.isolation_incident(reservation)
        if churn:
            self.churn(pause)

    # -- acts ----------------------------------------------------------------------------------

    def gpu_implant_incident(self, tenant: Tenant, gpu: int = 5) -> None:
        """Incident 2's second act: a VBIOS change survives the wipe and the BMC's reading names it."""
        reservation = self.reserve(tenant, 1)
        self.wait(f"{tenant.name}'s node active", lambda: self.state(reservation) == ReservationState.ACTIVE)
        node = Node.objects.get(reservation=reservation)
        self.fault({"node": node.name, "kind": "gpu_measurement_tamper", "gpu": gpu})
        reservations.release_reservation(reservation_id=reservation.pk, actor=f"tenant:{tenant.name}")
        self.say(f"incident 2, again: {tenant.name} changed the VBIOS of GPU {gpu} of {node.name} and released it")
        self.wait(f"{node.name} quarantined", lambda: self.node_state(node) == State.QUARANTINED)
        result = AttestationResult.objects.filter(node=node).first()
        caught = [f for f in (result.failures if result else []) if f["component"].startswith(f"gpu{gpu}.out_of_band")]
        if not caught:
            found = Node.objects.get(pk=node.pk).quarantine_reason
            raise CommandError(f"incident 2: GPU {gpu} of {node.name} should fail out of band: {found[:160]}")
        self.say(
            f"incident 2 over again: {caught[0]['code']} {caught[0]['component']}: found {caught[0]['found'][:80]}"
        )

    def firmware_incident(self, tenant: Tenant) -> None:
        """Incident 3, and its expected outcome: the tampered BMC reflashed, the node available again."""
        reservation = self.reserve(tenant, 1)
        self.wait(f"{tenant.name}'s node active", lambda: self.state(reservation) == ReservationState.ACTIVE)
        node = Node.objects.get(reservation=reservation)
        actor = f"tenant:{tenant.name}"
        if selectors.firmware_baseline_for(node_id=node.pk) is None:
            reservations.release_reservation(reservation_id=reservation.pk, actor=actor)
            self.say(
                f"incident 3 skipped: no firmware baseline applies to {node.name} (manage.py set_firmware_baseline)"
            )
            return
        self.fault({"node": node.name, "kind": "firmware_tamper", "component": "BMC"})
        reservations.release_reservation(reservation_id=reservation.pk, actor=actor)
        released = AuditEvent.objects.filter(node=node, event=Event.RELEASED).latest("id")
        self.say(f"incident 3: {tenant.name} replaced {node.name}'s BMC firmware and released it")
        self.wait(
            f"{node.name} wiped and inspected", lambda: self.node_state(node) in (State.AVAILABLE, State.QUARANTINED)
        )
        check = (
            AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.FIRMWARE_CHECKED, id__gt=released.pk)
            .order_by("id")
            .last()
        )
        if self.node_state(node) != State.AVAILABLE or check is None or "BMC" not in check.detail["repaired"]:
            found = Node.objects.get(pk=node.pk).quarantine_reason or (check.reason if check else "no firmware check")
            raise CommandError(f"incident 3: {node.name} should be available with its BMC repaired: {found[:160]}")
        self.say(f"incident 3 over: {node.name} available again, {check.reason}")

    def isolation_incident(self, neighbours: Reservation) -> None:
        """Incident 4, and its expected outcome: eve's node reaches its own address and none of its
        neighbours', and its port moved into their VLAN by hand is put back."""
        eve = self.tenant("eve")
        key = asyncssh.generate_private_key("ssh-ed25519")
        public_key = key.export_public_key().decode().strip()
        ssh_key = reservations.add_ssh_key(tenant=eve, name=f"chaos-{time.time_ns()}", public_key=public_key)
        reservation = self.reserve(eve, 1, ssh_keys=[ssh_key])
        self.wait("eve's node active", lambda: self.state(reservation) == ReservationState.ACTIVE)
        node = Node.objects.get(reservation=reservation)
        (machine,) = reservation_machines([reservation])[reservation.pk]
        if machine["address"] is None:
            self.say(f"incident 4: no probes: {node.name} has no address to log in at (manage.py add_address_pool)")
        else:
            self.probe_neighbours(node, machine, key, own=reservation, neighbours=neighbours)
        self.drift_into(node, neighbours)
        reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:eve")
        reservations.delete_ssh_key(tenant=eve, key_id=ssh_key.pk)

    def probe_neighbours(
        self, node: Node, machine: dict, key: asyncssh.SSHKey, *, own: Reservation, neighbours: Reservation
    ) -> None:
        """Ping from inside the node: the neighbours' private and provisioning addresses must not
        answer, the node's own private address must."""
        provisioning = {n["name"]: n["network"]["provisioning_address"] for n in self.inventory()["nodes"]}
        targets = {f"{name} private": address for name, address in sorted(private_addresses(neighbours.pk).items())}
        targets |= {
            f"{name} provisioning": provisioning[name]
            for name in Node.objects.filter(reservation=neighbours).order_by("name").values_list("name", flat=True)
        }
        own_address = private_addresses(own.pk).get(node.name)
        if own_address is None:
            raise CommandError(f"incident 4: {node.name} is active with no private address")
        self.say(f"incident 4: eve logs in to {node.name} and pings {len(targets)} addresses of acme's nodes")
        try:
            answered = asyncio.run(
                asyncio.wait_for(pings(machine, key, [own_address, *targets.values()]), PROBE_TIMEOUT_S)
            )
        except (OSError, asyncssh.Error, TimeoutError) as error:
            raise CommandError(f"incident 4: could not probe from {node.name}: {error!r}") from error
        reached = [what for what, address in targets.items() if answered[address]]
        if reached:
            raise CommandError(f"incident 4: {node.name} of eve reaches acme's {', '.join(reached)}")
        if not answered[own_address]:
            raise CommandError(f"incident 4: {node.name} does not reach its own private address {own_address}")
        self.say(f"incident 4: none of the {len(targets)} answered; {node.name}'s own {own_address} did")

    def drift_into(self, node: Node, neighbours: Reservation) -> None:
        """Move the node's Ethernet port into the neighbours' VLAN by hand, and wait for the repair."""
        ethernet = reservation_networks(neighbours.pk).get("ethernet")
        if not ethernet:
            raise CommandError(f"incident 4: acme's reservation {neighbours.pk} has no Ethernet segment")
        segment = str(ethernet["segment"])
        before = AuditEvent.objects.filter(node=node).order_by("-id").values_list("id", flat=True).first() or 0
        injected = clock.now()
        self.fault({"kind": "fabric_drift", "fabric": "ethernet", "node": node.name, "segment": segment})
        self.say(f"incident 4: someone moved {node.name}'s switch port into acme's VLAN {segment} by hand")
        repairs = AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED, id__gt=before)
        self.wait(f"{node.name}'s port put back", repairs.exists)
        repaired = repairs.earliest("id")
        window = (repaired.at - injected).total_seconds()
        self.say(f"incident 4 over: {node.name}'s port put back {window:.1f} s after it was moved: {repaired.reason}")

    def churn(self, pause: float) -> None:
        rng = random.Random()
        tenants = [self.tenant(name) for name in CHURN_TENANTS]
        self.say("churn: tenants reserving and releasing (Ctrl-C stops it)")
        while True:
            tenant = rng.choice(tenants)
            held = Reservation.objects.filter(tenant=tenant, state__in=LIVE_STATES).first()
            if held and rng.random() < 0.5:
                reservations.release_reservation(reservation_id=held.pk, actor=f"tenant:{tenant.name}")
            elif not held:
                rack_scale = rng.random() < 0.1
                try:
                    self.reserve(tenant, 8 if rack_scale else rng.randint(1, 4), rack_scale=rack_scale)
                except PlacementRefused as refused:
                    self.say(f"churn: {tenant.name} refused: {refused.reason}")
            time.sleep(max(1.0, pause / 3))

    # -- helpers -------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        self.stdout.write(f"[chaos] {message}")
        self.stdout.flush()

    def wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            if time.monotonic() > deadline:
                raise CommandError(f"gave up after {self.timeout:g} s waiting for {what}")
            time.sleep(0.5)

    def tenant(self, name: str) -> Tenant:
        return Tenant.objects.get_or_create(name=name)[0]

    def reserve(
        self,
        tenant: Tenant,
        count: int,
        *,
        pod: str | None = None,
        rack_scale: bool = False,
        ssh_keys: list[SSHKey] | None = None,
    ) -> Reservation:
        reservation = reservations.create_reservation(
            tenant=tenant,
            node_count=count,
            pod=Pod.objects.get(name=pod) if pod else None,
            rack_scale=rack_scale,
            ssh_keys=ssh_keys or [],
            actor=f"tenant:{tenant.name}",
        )
        self.say(f"{tenant.name} reserved {count} node(s): {reservation.placement}")
        return reservation

    def fault(self, body: dict) -> None:
        try:
            requests.post(f"{self.bmcsim_url}/bmcsim/v1/faults", json=body, timeout=10).raise_for_status()
        except requests.RequestException as error:
            raise CommandError(f"bmcsim refused the fault {body}: {error}") from error

    def inventory(self) -> dict:
        try:
            answer = requests.get(f"{self.bmcsim_url}/bmcsim/v1/inventory", timeout=10)
            answer.raise_for_status()
        except requests.RequestException as error:
            raise CommandError(f"bmcsim's inventory: {error}") from error
        return answer.json()

    @staticmethod
    def available(pod: str) -> int:
        return Node.objects.filter(state="available", rack__pod__name=pod).count()

    @staticmethod
    def state(reservation: Reservation) -> str:
        return Reservation.objects.values_list("state", flat=True).get(pk=reservation.pk)

    @staticmethod
    def node_state(node: Node) -> str:
        return Node.objects.values_list("state", flat=True).get(pk=node.pk)


async def pings(machine: dict, key: asyncssh.SSHKey, addresses: list[str]) -> dict[str, bool]:
    """Log in to the machine as its tenant and ping every address at once: whether each answered."""
    async with asyncssh.connect(
        machine["address"], machine["ssh_port"], username="root", client_keys=[key], known_hosts=None
    ) as connection:
        results = await asyncio.gather(
            *(connection.run(f"ping -c 1 -W 1 {address}", check=False) for address in addresses)
        )
    return {address: result.exit_status == 0 for address, result in zip(addresses, results, strict=True)}
