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
    node: Node,
    verdict: Verdict = AFFIRMING,
    *,
    nonce: bytes = NONCE,
    signed_at=None,
    firmware: dict | None = None,
    networks: dict | None = None,
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
        networks=networks,
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


READ_AT = "2026-12-06T10:59:00+00:00"
OFF_EVERY_TENANT = {
    "read_at": READ_AT,
    "reservation": None,
    "fabrics": {
        "ethernet": {"membership": "10", "tenant": False, "read_at": READ_AT},
        "infiniband": {"membership": "", "tenant": False, "read_at": READ_AT},
        "nvlink": {"membership": "", "tenant": False, "read_at": READ_AT},
    },
}
ON_R42_FABRICS = {
    "ethernet": {"membership": "1001", "tenant": True, "read_at": READ_AT},
    "infiniband": {"membership": "0x1001", "tenant": True, "read_at": READ_AT},
    "nvlink": {"membership": "gpufleet-r42", "tenant": True, "read_at": READ_AT},
}
ON_R42 = {"read_at": READ_AT, "reservation": 42, "fabrics": ON_R42_FABRICS}
R42 = ("ethernet=1001", "infiniband=0x1001", "nvlink=gpufleet-r42")


def expecting(*memberships: str) -> list[str]:
    return [argument for membership in memberships for argument in ("--expect-network", membership)]


def last_table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.split("\n\n")[-1].splitlines()]


def test_an_inspections_result_lists_the_node_off_every_tenants_network(anonymous, fleet, signing_key):
    attest(fleet[0], networks=OFF_EVERY_TENANT)
    completed = anonymous.run("verify", fleet[0].name)
    assert completed.returncode == 0, completed.stderr
    assert last_table(completed.stdout) == [
        ["FABRIC", "MEMBERSHIP", "TENANT", "NETWORK", "READ", "AT"],
        ["ethernet", "10", "no", "2026-12-06", "10:59:00Z"],
        ["infiniband", "none", "no", "2026-12-06", "10:59:00Z"],
        ["nvlink", "none", "no", "2026-12-06", "10:59:00Z"],
    ]


def test_a_handoffs_result_lists_the_tenants_networks_and_when_the_verdict_was_reached(anonymous, fleet, signing_key):
    node = fleet[0]
    inspected_at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    attest(node, signed_at=inspected_at, networks=OFF_EVERY_TENANT)
    services.sign_handoff(node_id=node.pk, node_name=node.name, networks=ON_R42)
    completed = anonymous.run("verify", node.name, *expecting(*R42))
    assert completed.returncode == 0, completed.stderr
    summary = dict(line.split(None, 1) for line in completed.stdout.split("\n\n")[1].splitlines())
    assert summary["attested"] == f"{inspected_at:%Y-%m-%d %H:%M:%S}Z" and summary["reservation"] == "42"
    assert summary["nonce"] == b64url(NONCE)
    assert last_table(completed.stdout)[1:] == [
        ["ethernet", "1001", "yes", "2026-12-06", "10:59:00Z"],
        ["infiniband", "0x1001", "yes", "2026-12-06", "10:59:00Z"],
        ["nvlink", "gpufleet-r42", "yes", "2026-12-06", "10:59:00Z"],
    ]


def test_networks_other_than_expected_are_not_as_asked_offline_too(anonymous, fleet, signing_key, tmp_path):
    node = fleet[0]
    drifted = {"membership": "gpufleet-r42", "tenant": True, "read_at": None, "confirmed": False}
    unconfirmed = {**ON_R42, "fabrics": {**ON_R42_FABRICS, "nvlink": drifted}}
    (tmp_path / "keys.json").write_text(json.dumps(services.public_keys()))
    for networks, expected, says in (
        (ON_R42, ("ethernet=1002",), "it reads ethernet membership '1001', not '1002'"),
        (OFF_EVERY_TENANT, R42[:1], "it reads ethernet membership '10', not '1001'"),
        (None, R42[:1], "it carries no networks claim: no fabric membership is proven"),
        ({**ON_R42, "fabrics": {}}, ("nvlink=gpufleet-r42",), "it reads no nvlink membership"),
        (unconfirmed, R42, "its nvlink membership 'gpufleet-r42' was not confirmed by the fabric's read-back"),
    ):
        (tmp_path / "result.jwt").write_text(attest(node, networks=networks))
        fetched = anonymous.run("verify", node.name, *expecting(*expected))
        assert fetched.returncode == 1 and fetched.stderr == f"not as asked: {says}\n", fetched.stderr
        assert fetched.stdout.startswith(f"{node.name}: genuine, but NOT as asked\n")
        offline = subprocess.run(
            [sys.executable, "-m", "attestation.verify", "result.jwt", "--jwks", "keys.json", *expecting(*expected)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (offline.returncode, offline.stderr) == (fetched.returncode, fetched.stderr)
    assert "unconfirmed" in last_table(fetched.stdout)[-1]


def test_an_expected_network_must_name_a_fabric(anonymous, fleet, signing_key):
    attest(fleet[0], networks=ON_R42)
    for wrong in ("vlan=1001", "ethernet", "Ethernet=1001"):
        completed = anonymous.run("verify", fleet[0].name, "--expect-network", wrong)
        assert completed.returncode == 2 and "is not FABRIC=MEMBERSHIP" in completed.stderr


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
