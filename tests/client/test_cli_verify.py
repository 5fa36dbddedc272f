"""`gpufleet verify NODE`: the node's signed result and the JWKS fetched from the live control
plane, verified here with the client's offline verifier (the one `python -m attestation.verify` runs, same statuses)."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys

import pytest
from gpufleet_client.offline_verification import verify_result

from attestation import ear, services
from attestation.verifier import Failure, Verdict
from fleet.models import Node
from tests.support import REPO_ROOT

IMPLANT = Failure("unknown_component_digest", "kernel", "a reference digest of kernel", "cd" * 32)
AFFIRMING = Verdict(True, (), {"kernel": "ab" * 32})
CONTRAINDICATED = Verdict(False, (IMPLANT,), {"kernel": "cd" * 32})
NONCE = bytes(range(32))


@pytest.fixture
def signing_key(settings, tmp_path):
    """The control plane's result-signing key, a test key of its own: GET /v1/attestation/keys serves it."""
    ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)


def attest(
    node: Node, verdict: Verdict = AFFIRMING, *, nonce: bytes = NONCE, signed_at=None, firmware: dict | None = None
) -> str:
    """A result signed as services.appraise signs one, and recorded as the node's latest."""
    kid, key = services.signing_keys()[0]
    token = ear.sign_result(
        verdict=verdict,
        node=node.name,
        nonce=nonce,
        verifier_id=services.VERIFIER_ID,
        private_key=key,
        kid=kid,
        now=signed_at or datetime.datetime.now(datetime.UTC),
        firmware=firmware,
    )
    services.record(node_id=node.pk, nonce=nonce, appraisal=services.Appraisal(verdict, token, kid, "default"))
    return token


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def tampered(token: str, **claims) -> str:
    """The token with its claims changed and its signature kept, as a man in the middle would."""
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return ".".join((header, b64url(json.dumps({**decoded, **claims}).encode()), signature))


def test_a_genuine_affirming_result_verifies(anonymous, fleet, signing_key):
    node = fleet[0]
    attest(node)
    completed = anonymous.run("verify", node.name)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    first, _, rest = completed.stdout.partition("\n\n")
    assert first == f"{node.name}: genuine and affirming"
    summary = dict(line.split(None, 1) for line in rest.split("\n\n")[0].splitlines())
    assert summary["node"] == node.name and summary["nonce"] == b64url(NONCE)
    assert summary["verifier"] == services.VERIFIER_ID
    assert ["kernel", "ab" * 32] in [line.split() for line in completed.stdout.splitlines()]


def test_the_firmware_the_inspection_found_is_listed_with_what_it_repaired(anonymous, fleet, signing_key):
    node = fleet[0]
    components = {
        "BIOS": {"version": "GF-BIOS 2.4.0", "digest": "01" * 32},
        "BMC": {"version": "1.5", "digest": "02" * 32},
    }
    attest(node, firmware={"baseline": "h100", "components": components, "secure_boot": "Enabled", "repaired": ["BMC"]})
    completed = anonymous.run("verify", node.name)
    assert completed.returncode == 0, completed.stderr
    lines = [line.split() for line in completed.stdout.split("\n\n")[-1].splitlines()]
    assert lines == [
        ["FIRMWARE", "VERSION", "DIGEST", "REPAIRED"],
        ["BIOS", "GF-BIOS", "2.4.0", "01" * 32, "no"],
        ["BMC", "1.5", "02" * 32, "yes"],
    ]


def test_a_result_without_firmware_lists_none(anonymous, fleet, signing_key):
    attest(fleet[0])
    assert "FIRMWARE" not in anonymous.run("verify", fleet[0].name).stdout


def test_a_tampered_result_is_not_genuine(anonymous, fleet, signing_key):
    node = fleet[0]
    token = attest(node, CONTRAINDICATED)
    forged = tampered(token, submods={node.name: {"ear.status": "affirming"}}, failures=[])
    services.record(
        node_id=node.pk,
        nonce=NONCE,
        appraisal=services.Appraisal(AFFIRMING, forged, services.signing_keys()[0][0], "default"),
    )
    completed = anonymous.run("verify", node.name)
    assert completed.returncode == 1
    assert completed.stdout == f"{node.name}: NOT genuine: the result does not verify with the server's signing keys\n"
    assert completed.stderr.startswith("invalid result: the result does not verify with key ")


def test_a_contraindicated_result_exits_3_naming_the_failure(anonymous, fleet, signing_key):
    node = fleet[0]
    attest(node, CONTRAINDICATED)
    completed = anonymous.run("verify", node.name)
    assert completed.returncode == 3
    assert completed.stdout.startswith(f"{node.name}: genuine but CONTRAINDICATED\n")
    assert completed.stderr.splitlines() == [
        f"contraindicated: node {node.name} is contraindicated",
        f"contraindicated: unknown_component_digest kernel: expected a reference digest of kernel, found {'cd' * 32}",
    ]
    assert anonymous.run("verify", node.name, "--allow-contraindicated").returncode == 0


def test_nonce_and_age_are_checked_as_asked(anonymous, fleet, signing_key):
    node = fleet[0]
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    attest(node, nonce=NONCE, signed_at=an_hour_ago)
    assert anonymous.run("verify", node.name, "--nonce", NONCE.hex(), "--max-age", "7200").returncode == 0
    assert anonymous.run("verify", node.name, "--nonce", b64url(NONCE)).returncode == 0

    other_nonce = anonymous.run("verify", node.name, "--nonce", "00" * 32)
    assert other_nonce.returncode == 1
    assert other_nonce.stderr == f"not as asked: it answers nonce {b64url(NONCE)} (base64url), not the one given\n"
    assert other_nonce.stdout.startswith(f"{node.name}: genuine, but NOT as asked\n")

    too_old = anonymous.run("verify", node.name, "--max-age", "600")
    assert too_old.returncode == 1 and "s ago: more than 600 s" in too_old.stderr

    bad_nonce = anonymous.run("verify", node.name, "--nonce", "not a nonce!")
    assert bad_nonce.returncode == 2 and "is neither base64url" in bad_nonce.stderr


def test_a_node_without_a_result_or_unknown_is_1_not_3(anonymous, fleet, signing_key):
    """3 means contraindicated to verify: a missing result must not read as a failed attestation."""
    not_attested = anonymous.run("verify", fleet[0].name)
    assert not_attested.returncode == 1
    assert not_attested.stderr == f"gpufleet: node {fleet[0].name} has not been attested yet (404)\n"
    assert anonymous.run("verify", "node-999").returncode == 1


def test_json_prints_the_servers_answer_and_keeps_the_offline_status(anonymous, fleet, signing_key):
    node = fleet[0]
    token = attest(node, CONTRAINDICATED)
    completed = anonymous.run("verify", node.name, "--json")
    assert completed.returncode == 3
    answer = json.loads(completed.stdout)
    assert answer["token"] == token and answer["verified"] is True
    assert answer["claims"] == verify_result(token, services.public_keys())


def test_the_same_result_gets_the_same_status_from_attestation_verify(anonymous, fleet, signing_key, tmp_path):
    """One verifier: gpufleet verify and python -m attestation.verify agree, on the same token and keys."""
    node = fleet[0]
    (tmp_path / "keys.json").write_text(json.dumps(services.public_keys()))
    for verdict, nonce, status in ((AFFIRMING, NONCE, 0), (CONTRAINDICATED, NONCE, 3), (AFFIRMING, bytes(32), 1)):
        (tmp_path / "result.jwt").write_text(attest(node, verdict, nonce=nonce))
        asked = ["--node", node.name, "--nonce", NONCE.hex()]
        offline = subprocess.run(
            [sys.executable, "-m", "attestation.verify", "result.jwt", "--jwks", "keys.json", *asked],
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        fetched = anonymous.run("verify", node.name, "--nonce", NONCE.hex())
        assert offline.returncode == fetched.returncode == status, (offline.stderr, fetched.stderr)
        assert offline.stderr == fetched.stderr


def test_an_unreachable_server_is_4(anonymous):
    completed = anonymous.run("verify", "node-001", env={"GPUFLEET_URL": "http://127.0.0.1:9"})
    assert completed.returncode == 4 and "could not reach" in completed.stderr
