"""The networks a node's signed results carry, from its attachments as last read back: at
inspection off the previous tenant's, at the handoff on its own tenant's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from gpufleet_client.offline_verification import verify_result

from attestation import ear, services
from attestation.models import ResultKind
from attestation.verifier import Verdict
from fleet.leases import Lease
from fleet.models import NetworkAttachment, Node, TenantNetwork
from fleet.services.tenant_networks import ensure_tenant_networks
from reservations.models import Reservation
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from workflows.node_workflows.handoff import networks_read_back, sign_handoff
from workflows.node_workflows.inspection import to_appraise
from workflows.node_workflows.run import NotYet, Run, StepFailed

READ_AT = datetime(2026, 12, 6, 10, 59, tzinfo=UTC)


@pytest.fixture
def signing_key(settings, tmp_path):
    ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)


def tenant_networks(reservation: Reservation, node: Node) -> dict[str, TenantNetwork]:
    """The reservation's networks on each fabric the node is on, allocated as placement does."""
    return dict(ensure_tenant_networks(reservation_id=reservation.pk, node_id=node.pk).networks)


def attach(node: Node, fabric: str, *, found: str, wanted=None, confirmed=True, at=READ_AT) -> None:
    NetworkAttachment.objects.update_or_create(
        node=node,
        fabric=fabric,
        defaults={"wanted": wanted, "found": found, "confirmed": confirmed, "checked_at": at},
    )


def run_on(node: Node) -> Run:
    lease = Lease(node_id=node.pk, owner="test", token=1)  # the steps here never read it
    return Run(node, lease, "test", FakeBMC([]), FakeAgent(node))


def inspected(node: Node) -> None:
    kid, key = services.signing_keys()[0]
    verdict = Verdict(True, (), {"kernel": "ab" * 32})
    token = ear.sign_result(
        verdict=verdict,
        node=node.name,
        nonce=bytes(32),
        verifier_id=services.VERIFIER_ID,
        private_key=key,
        kid=kid,
        now=READ_AT - timedelta(hours=1),
    )
    services.record(node_id=node.pk, nonce=bytes(32), appraisal=services.Appraisal(verdict, token, kid, "default"))


def test_an_inspection_signs_the_node_off_the_previous_tenants_networks_or_says_it_is_not(node, alice):
    old = tenant_networks(Reservation.objects.create(tenant=alice, node_count=1), node)
    drive(node, "inspection_started")
    attach(node, "ethernet", found="10")
    attach(node, "infiniband", found=old["infiniband"].value, confirmed=False, at=READ_AT + timedelta(seconds=5))
    attach(node, "nvlink", found="", at=READ_AT + timedelta(seconds=1))
    networks = to_appraise(Node.objects.get(pk=node.pk)).networks
    assert networks == {
        "read_at": READ_AT.isoformat(),
        "reservation": None,
        "fabrics": {
            "ethernet": {"membership": "10", "tenant": False, "read_at": READ_AT.isoformat()},
            "infiniband": {
                "membership": old["infiniband"].value,
                "tenant": True,
                "read_at": (READ_AT + timedelta(seconds=5)).isoformat(),
                "confirmed": False,
            },
            "nvlink": {"membership": "", "tenant": False, "read_at": (READ_AT + timedelta(seconds=1)).isoformat()},
        },
    }


def test_the_handoff_signs_the_tenants_networks_as_read_back(active_node, alices_reservation, signing_key):
    inspected(active_node)
    for fabric, network in tenant_networks(alices_reservation, active_node).items():
        attach(active_node, fabric, found=network.value, wanted=network, at=READ_AT + timedelta(seconds=len(fabric)))
    sign_handoff(run_on(active_node))
    result = services.latest_result(active_node.name)
    assert result is not None and result.kind == ResultKind.HANDOFF
    claims = verify_result(result.token, services.public_keys())
    assert claims["networks"] == networks_read_back(active_node)
    assert claims["networks"]["reservation"] == alices_reservation.pk
    assert claims["networks"]["read_at"] == (READ_AT + timedelta(seconds=len("nvlink"))).isoformat()
    memberships = {fabric: (m["membership"], m["tenant"]) for fabric, m in claims["networks"]["fabrics"].items()}
    assert memberships == {
        "ethernet": (str(alices_reservation.networks.get(fabric="ethernet").vlan), True),
        "infiniband": (alices_reservation.networks.get(fabric="infiniband").value, True),
        "nvlink": (f"gpufleet-r{alices_reservation.pk}", True),
    }


def test_the_handoff_waits_while_a_membership_is_unconfirmed_and_fails_without_an_inspection(
    active_node, alices_reservation, signing_key
):
    wanted = tenant_networks(alices_reservation, active_node)
    for fabric, network in wanted.items():
        attach(active_node, fabric, found=network.value, wanted=network)
    with pytest.raises(StepFailed, match="has no inspection result"):
        sign_handoff(run_on(active_node))
    inspected(active_node)
    attach(active_node, "infiniband", found="", wanted=wanted["infiniband"], confirmed=False)
    with pytest.raises(NotYet, match="the infiniband membership is no longer read back as wanted"):
        sign_handoff(run_on(active_node))
    latest = services.latest_result(active_node.name)
    assert latest is not None and latest.kind == ResultKind.INSPECTION
