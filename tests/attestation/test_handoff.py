"""A node's handoff to its tenant: its latest inspection's verdict signed again, unchanged, with the
tenant's networks as read back, and served as the node's latest result."""

from __future__ import annotations

import datetime

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from gpufleet_client.offline_verification import verify_result

from attestation import ear, services
from attestation.models import AttestationResult, ResultKind
from attestation.verifier import Failure, Verdict

NONCE = bytes(range(32))
INSPECTED_AT = datetime.datetime(2026, 12, 6, 9, 0, tzinfo=datetime.UTC)
HANDED_OFF_AT = INSPECTED_AT + datetime.timedelta(hours=2)
AFFIRMING = Verdict(True, (), {"kernel": "ab" * 32})
IMPLANT = Failure("unknown_component_digest", "kernel", "a reference digest of kernel", "cd" * 32)
FIRMWARE = {"baseline": "h100", "components": {"BMC": {"version": "1.5", "digest": "02" * 32}}, "repaired": []}
OFF_EVERY_TENANT = {
    "read_at": "2026-12-06T08:59:00+00:00",
    "reservation": None,
    "fabrics": {"ethernet": {"membership": "10", "tenant": False, "read_at": "2026-12-06T08:59:00+00:00"}},
}


def tenants_networks(reservation: int) -> dict:
    read_at = "2026-12-06T10:59:00+00:00"
    return {
        "read_at": read_at,
        "reservation": reservation,
        "fabrics": {
            "ethernet": {"membership": "1001", "tenant": True, "read_at": read_at},
            "infiniband": {"membership": "0x1001", "tenant": True, "read_at": read_at},
            "nvlink": {"membership": f"gpufleet-r{reservation}", "tenant": True, "read_at": read_at},
        },
    }


@pytest.fixture
def signing_key(settings, tmp_path):
    ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)


def inspect(node, verdict: Verdict = AFFIRMING, *, at=INSPECTED_AT) -> AttestationResult:
    """An inspection's result, signed and recorded as services.appraise and record do."""
    kid, key = services.signing_keys()[0]
    token = ear.sign_result(
        verdict=verdict,
        node=node.name,
        nonce=NONCE,
        verifier_id=services.VERIFIER_ID,
        private_key=key,
        kid=kid,
        now=at,
        firmware=FIRMWARE,
        networks=OFF_EVERY_TENANT,
    )
    return services.record(node_id=node.pk, nonce=NONCE, appraisal=services.Appraisal(verdict, token, kid, "default"))


def hand_off(node, reservation: int = 42, *, at=HANDED_OFF_AT) -> AttestationResult:
    return services.sign_handoff(node_id=node.pk, node_name=node.name, networks=tenants_networks(reservation), now=at)


def claims_of(result: AttestationResult) -> dict:
    return verify_result(result.token, services.public_keys())


def test_the_handoff_signs_the_inspections_verdict_unchanged_with_the_tenants_networks(node, signing_key):
    inspection = inspect(node)
    handoff = hand_off(node)
    inspected, handed = claims_of(inspection), claims_of(handoff)
    assert handed["iat"] == int(HANDED_OFF_AT.timestamp())
    assert handed["attested_at"] == inspected["iat"] == int(INSPECTED_AT.timestamp())
    assert handed["networks"] == tenants_networks(42)
    for claim in ("eat_nonce", "submods", "node", "failures", "measurements", "firmware", "ear.verifier-id"):
        assert handed[claim] == inspected[claim], claim
    assert (handoff.kind, inspection.kind) == (ResultKind.HANDOFF, ResultKind.INSPECTION)
    assert (handoff.nonce, handoff.affirming, handoff.measurements) == (NONCE.hex(), True, {"kernel": "ab" * 32})


def test_the_node_serves_its_handoff_result_while_the_tenant_holds_it(node, signing_key, client):
    inspect(node)
    handoff = hand_off(node)
    assert services.latest_result(node.name) == handoff
    answer = client.get(f"/v1/nodes/{node.name}/attestation").json()
    assert answer["verified"] is True and answer["token"] == handoff.token
    assert answer["claims"]["networks"]["reservation"] == 42


def test_a_later_handoff_carries_the_inspection_not_the_previous_handoff(node, signing_key):
    """A reinstall hands the node over again: its verdict is still the inspection's, of that time."""
    inspect(node)
    hand_off(node, 42)
    again = claims_of(hand_off(node, 42, at=HANDED_OFF_AT + datetime.timedelta(hours=5)))
    assert again["attested_at"] == int(INSPECTED_AT.timestamp())
    assert again["networks"] == tenants_networks(42)


def test_nothing_is_handed_off_without_an_affirming_inspection_that_verifies(node, signing_key, settings, tmp_path):
    with pytest.raises(services.NothingToHandOff, match="has no inspection result"):
        hand_off(node)

    inspect(node, Verdict(False, (IMPLANT,), {"kernel": "cd" * 32}))
    with pytest.raises(services.NothingToHandOff, match="did not affirm"):
        hand_off(node)

    inspect(node, at=INSPECTED_AT + datetime.timedelta(minutes=1))
    rotated_away = tmp_path / "rotated"
    rotated_away.mkdir()
    ear.generate_signing_key(rotated_away / "2026-12-06.pem")
    settings.GPUFLEET_SIGNING_KEY = str(rotated_away)  # the key that signed the inspection is gone
    with pytest.raises(services.NothingToHandOff, match="does not verify"):
        hand_off(node)
    assert not AttestationResult.objects.filter(kind=ResultKind.HANDOFF).exists()


def test_a_result_kind_is_one_of_the_known_ones(node, signing_key):
    result = inspect(node)
    result.kind = "rumour"
    with pytest.raises(ValidationError, match="kind"):
        result.full_clean()
    with pytest.raises(IntegrityError, match="attestation_result_kind_known"), transaction.atomic():
        AttestationResult.objects.filter(pk=result.pk).update(kind="rumour")
