"""Incidents as the pages see them: an XID under a tenant and its replacement; a failed attestation."""

from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.utils import timezone

from attestation import ear
from attestation.models import AttestationResult
from attestation.verifier import Failure, Verdict
from fleet.models import Node
from remediation import rules
from remediation import services as remediation
from reservations import services as reservations
from tests.conftest import drive
from tests.remediation.test_webhook import alert, payload

FAILURE = Failure(code="unknown_component_digest", component="kernel", expected="a1" * 32, found="b2" * 32)


def bring_up(reservation):
    for node in Node.objects.filter(reservation=reservation, state="provisioning"):
        drive(node, "provision_succeeded")
    return reservations.settle_reservation(reservation_id=reservation.pk)


def xid_under_a_tenant(tenant, victim_index: int = 0):
    """A 2-node reservation comes up, XID 79 quarantines one of its nodes, a replacement comes up.

    Returns (remediation, reservation, victim). Each step commits on its own, as in production,
    so the timeline's times are distinct.
    """
    reservation = reservations.create_reservation(tenant=tenant, node_count=2, actor="test")
    bring_up(reservation)
    victim = Node.objects.filter(reservation=reservation).order_by("name")[victim_index]
    firing = alert(victim.name)
    firing["startsAt"] = timezone.now().isoformat().replace("+00:00", "Z")
    (applied,) = remediation.receive_alerts(rules.parse_webhook(payload(firing)))
    reservations.heal_reservation(reservation_id=reservation.pk)
    reservations.provision_held_nodes()
    bring_up(reservation)
    return applied, reservation, victim


def signed_result(node: Node, *, failures=(FAILURE,)) -> AttestationResult:
    key = Ed25519PrivateKey.generate()
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
