"""What tests build on the real PostgreSQL: tenants, an enrolled fleet, nodes walked through the
lifecycle, Alertmanager's webhook bodies, and the incidents the pages show (an XID under a
tenant and its replacement; a failed attestation)."""

from datetime import UTC, datetime
from io import StringIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from attestation import ear
from attestation import services as attestation
from attestation.models import AttestationResult
from attestation.verifier import Failure, Verdict
from core.topology import default_layout
from fleet.inventory import records_from_layout
from fleet.models import Node
from fleet.services import enrol_nodes, transition
from remediation import rules
from remediation import services as remediation
from reservations import services as reservations

SMALL_FLEET = 12  # two racks: r01 full, r02 with four nodes
FAILURE = Failure(code="unknown_component_digest", component="kernel", expected="a1" * 32, found="b2" * 32)


def tenant_token(name: str) -> str:
    """Create the tenant as an operator would, and read its API token from the last line printed."""
    out = StringIO()
    call_command("create_tenant", name, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def enrol_default_fleet(node_count: int = SMALL_FLEET) -> list[Node]:
    enrol_nodes(records=records_from_layout(default_layout(node_count), "http://127.0.0.1:8100"), actor="test")
    return list(Node.objects.order_by("name"))


def drive(node: Node, *events: str, reservation=None, reason="test") -> Node:
    """Walk a node through events with the real service, as the workflows will."""
    for event in events:
        node = transition(node_id=node.pk, event=event, actor="test", reason=reason, reservation=reservation)
    return node


def make_available(nodes: list[Node]) -> list[Node]:
    return [drive(node, "inspection_started", "inspection_passed", "attestation_passed") for node in nodes]


def make_available_as_inspected(nodes: list[Node]) -> list[Node]:
    """make_available, each node with an affirming inspection result signed with the configured key, as
    a real inspection leaves it: what provisioning's last step signs again for the tenant (sign_handoff)."""
    (_kid, key), *_older = attestation.signing_keys()
    for node in nodes:
        signed_result(node, failures=(), key=key)
    return make_available(nodes)


# An XID whose ladder quarantines at once (escaped ECC: no reset repairs it); XID 79's starts with a reboot.
QUARANTINING_XID = 140


def alert(node: str, *, xid=QUARANTINING_XID, gpu: int = 3, status: str = "firing", name="GPUFatalXid", n: int = 0):
    """One alert as Alertmanager's webhook carries it."""
    return {
        "status": status,
        "labels": {"alertname": name, "node": node, "gpu": str(gpu), "xid": str(xid), "severity": "critical"},
        "annotations": {"summary": f"XID {xid} on GPU {gpu} of {node}"},
        "startsAt": f"2026-11-29T17:00:{n:02d}.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://127.0.0.1:9090/graph",
        "fingerprint": f"{abs(hash((node, xid, gpu, name))) % 16**16:016x}",
    }


def payload(*alerts, status="firing"):
    """Alertmanager's webhook body (version 4) around `alerts`."""
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GPUFatalXid"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "gpu-fleet",
        "groupLabels": {"alertname": "GPUFatalXid"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": list(alerts),
    }


def bring_up(reservation):
    """The reservation's provisioning nodes come up, and it settles."""
    for node in Node.objects.filter(reservation=reservation, state="provisioning"):
        drive(node, "provision_succeeded")
    return reservations.settle_reservation(reservation_id=reservation.pk)


def xid_under_a_tenant(tenant, victim_index: int = 0):
    """A 2-node reservation comes up, an XID quarantines one of its nodes, a replacement comes up.

    Returns (remediation, reservation, victim). Each step commits on its own, as in production,
    so the timeline's times are distinct.
    """
    reservation = reservations.create_reservation(tenant=tenant, node_count=2, actor="test")
    bring_up(reservation)
    victim = Node.objects.filter(reservation=reservation).order_by("name")[victim_index]
    firing = alert(victim.name)
    firing["startsAt"] = timezone.now().isoformat().replace("+00:00", "Z")
    (parsed,) = rules.parse_webhook(payload(firing))
    assert isinstance(parsed, rules.Alert), parsed
    (applied,) = remediation.receive_alerts([parsed])
    reservations.heal_reservation(reservation_id=reservation.pk)
    reservations.provision_held_nodes()
    bring_up(reservation)
    return applied, reservation, victim


def signed_result(node: Node, *, failures=(FAILURE,), key: Ed25519PrivateKey | None = None) -> AttestationResult:
    """An inspection's result, signed with `key` (None: a key of its own, which nothing trusts)."""
    key = key or Ed25519PrivateKey.generate()
    kid = ear.key_id(key.public_key())
    verdict = Verdict(affirming=not failures, failures=tuple(failures), measurements={"kernel": "b2" * 32})
    token = ear.sign_result(
        verdict=verdict,
        node=node.name,
        nonce=b"\x01" * 32,
        verifier_id="test",
        private_key=key,
        kid=kid,
        now=datetime.now(UTC),
    )
    return AttestationResult.objects.create(
        node=node,
        nonce="01" * 32,
        affirming=verdict.affirming,
        failures=[f.__dict__ for f in failures],
        measurements=dict(verdict.measurements),
        policy="default",
        kid=kid,
        token=token,
    )


def failed_attestation_after_a_tenant(node: Node) -> AttestationResult:
    """An active node released, wiped, re-inspected, and its attestation failed (an implant)."""
    drive(node, "released", "wipe_succeeded", "inspection_passed")
    result = signed_result(node)
    drive(node, "attestation_failed", reason="unknown_component_digest: kernel")
    return result


def overlaps() -> int:
    """Pairs of allocations of one node whose periods overlap: double bookings, which must be 0."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM reservations_allocation a JOIN reservations_allocation b"
            " ON a.node_id = b.node_id AND a.id < b.id AND a.period && b.period"
        )
        return cursor.fetchone()[0]
