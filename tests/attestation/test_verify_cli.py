"""`python -m attestation.verify RESULT.jwt --jwks KEYS.json`, run as a subprocess the way a tenant would."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpufleet_client import offline_verification

from attestation import ear
from attestation.verifier import Failure, Verdict, new_nonce
from tests.support import REPO_ROOT

IMPLANT = Failure("unknown_component_digest", "kernel", "a reference digest of kernel", "cd" * 32)
NO_CC = Failure("cc_mode", "gpu0", "on", "off")
AFFIRMING = Verdict(True, (), {"kernel": "ab" * 32})
CONTRAINDICATED = Verdict(False, (IMPLANT, NO_CC), {"kernel": "cd" * 32})
# Run the CLI with Django made unimportable: it must need only PyJWT and cryptography.
WITHOUT_DJANGO = (
    "import runpy, sys; sys.modules['django'] = None; sys.argv[0] = 'attestation.verify';"
    " runpy.run_module('attestation.verify', run_name='__main__')"
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
    )


class Signer:
    """Signs results as the control plane does and writes them, with the JWKS, where a tenant would keep them."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.kid, self.key = ear.generate_signing_key(directory / "signing.pem")
        self.keys = directory / "keys.json"
        self.keys.write_text(json.dumps(ear.jwks([(self.kid, self.key.public_key())])))

    def result(
        self,
        verdict: Verdict = AFFIRMING,
        *,
        node: str = "node-001",
        nonce: bytes = bytes(32),
        now: datetime.datetime | None = None,
    ) -> Path:
        token = ear.sign_result(
            verdict=verdict,
            node=node,
            nonce=nonce,
            verifier_id="gpu-fleet test",
            private_key=self.key,
            kid=self.kid,
            now=now or datetime.datetime.now(datetime.UTC),
        )
        path = self.directory / "result.jwt"
        path.write_text(token + "\n")
        return path

    def verify(self, result: Path, *args: str) -> subprocess.CompletedProcess:
        return run_cli(str(result), "--jwks", str(self.keys), *args)


@pytest.fixture
def signer(tmp_path) -> Signer:
    return Signer(tmp_path)


def test_a_genuine_affirming_result_verifies_and_its_claims_are_printed(signer):
    completed = signer.verify(signer.result(AFFIRMING))
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["submods"]["node-001"]["ear.status"] == "affirming"
    assert completed.stderr == ""


def test_a_genuine_contraindicated_result_exits_3_naming_every_failure_and_still_prints_its_claims(signer):
    completed = signer.verify(signer.result(CONTRAINDICATED))
    assert completed.returncode == 3
    claims = json.loads(completed.stdout)
    assert claims["submods"]["node-001"]["ear.status"] == "contraindicated"
    assert claims["failures"][0]["component"] == "kernel"
    assert completed.stderr.splitlines() == [
        "contraindicated: node node-001 is contraindicated",
        f"contraindicated: unknown_component_digest kernel: expected a reference digest of kernel, found {'cd' * 32}",
        "contraindicated: cc_mode gpu0: expected on, found off",
    ]


def test_a_contraindicated_result_exits_0_when_contraindicated_results_are_allowed(signer):
    completed = signer.verify(signer.result(CONTRAINDICATED), "--allow-contraindicated")
    assert completed.returncode == 0
    assert "contraindicated: cc_mode gpu0" in completed.stderr


def test_a_result_for_the_node_and_nonce_asked_signed_recently_is_the_answer(signer):
    nonce = new_nonce(datetime.datetime.now(datetime.UTC))
    result = signer.result(AFFIRMING, node="node-007", nonce=nonce)
    completed = signer.verify(result, "--node", "node-007", "--nonce", b64url(nonce), "--max-age", "600")
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_result_about_another_node_is_refused_even_if_it_affirms(signer):
    completed = signer.verify(signer.result(AFFIRMING, node="node-002"), "--node", "node-001")
    assert completed.returncode == 1
    assert completed.stderr == "not as asked: it is about node 'node-002', not 'node-001'\n"
    assert json.loads(completed.stdout)["node"] == "node-002"  # what it does say, to read


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param(b64url, id="base64url as in eat_nonce"),
        pytest.param(lambda nonce: base64.urlsafe_b64encode(nonce).decode(), id="padded base64url"),
        pytest.param(bytes.hex, id="hex as the agent received it"),
        pytest.param(lambda nonce: nonce.hex().upper(), id="upper-case hex"),
    ],
)
def test_the_nonce_may_be_given_as_base64url_or_hex(signer, spelling):
    nonce = new_nonce(datetime.datetime.now(datetime.UTC)) + b"\xfb\xff"  # bytes whose base64url has - and _
    result = signer.result(nonce=nonce)
    assert "-" in b64url(nonce) or "_" in b64url(nonce)
    completed = signer.verify(result, "--nonce", spelling(nonce))
    assert completed.returncode == 0, completed.stderr


def test_a_result_for_another_nonce_is_refused(signer):
    now = datetime.datetime.now(datetime.UTC)
    asked, answered = new_nonce(now), new_nonce(now)
    completed = signer.verify(signer.result(nonce=answered), "--nonce", asked.hex())
    assert completed.returncode == 1
    assert completed.stderr == f"not as asked: it answers nonce {b64url(answered)} (base64url), not the one given\n"


def test_a_result_older_than_the_maximum_age_is_refused(signer):
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    result = signer.result(now=an_hour_ago)
    completed = signer.verify(result, "--max-age", "600")
    assert completed.returncode == 1
    assert "s ago: more than 600 s" in completed.stderr
    assert signer.verify(result, "--max-age", "7200").returncode == 0
    assert signer.verify(result).returncode == 0  # without --max-age the reader's clock is not asked


def test_a_result_from_the_readers_future_is_refused_beyond_a_small_skew(signer):
    now = datetime.datetime.now(datetime.UTC)
    later = signer.result(now=now + datetime.timedelta(minutes=10))
    completed = signer.verify(later, "--max-age", "600")
    assert completed.returncode == 1
    assert "after this machine's clock" in completed.stderr
    slightly_later = signer.result(now=now + datetime.timedelta(seconds=10))
    assert signer.verify(slightly_later, "--max-age", "600").returncode == 0


def test_every_reason_a_result_is_refused_is_given(signer):
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    result = signer.result(CONTRAINDICATED, node="node-002", nonce=bytes(32), now=an_hour_ago)
    completed = signer.verify(result, "--node", "node-001", "--nonce", "11" * 32, "--max-age", "60")
    assert completed.returncode == 1  # not as asked outranks contraindicated
    reasons = completed.stderr.splitlines()
    assert [reason.split(":")[0] for reason in reasons] == ["not as asked"] * 3 + ["contraindicated"] * 3
    assert "node 'node-002'" in reasons[0] and "nonce" in reasons[1] and "ago" in reasons[2]


@pytest.mark.parametrize(
    "args",
    [("--nonce", "not a nonce!"), ("--nonce", ""), ("--max-age", "-5"), ("--max-age", "nan"), ("--max-age", "soon")],
)
def test_a_malformed_nonce_or_age_is_a_usage_error(signer, args):
    completed = signer.verify(signer.result(), *args)
    assert completed.returncode == 2
    assert args[0] in completed.stderr and completed.stdout == ""


def test_a_tampered_result_is_rejected(signer):
    result = signer.result(CONTRAINDICATED)
    header, payload, signature = result.read_text().strip().split(".")
    result.write_text(f"{header}.{payload[:-2]}{'AA' if payload[-2:] != 'AA' else 'BB'}.{signature}")
    completed = signer.verify(result)
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert "invalid result" in completed.stderr


def test_a_result_from_an_unknown_key_is_rejected(signer, tmp_path):
    result = signer.result()
    other = Ed25519PrivateKey.generate().public_key()
    keys = tmp_path / "other-keys.json"
    keys.write_text(json.dumps(ear.jwks([(ear.key_id(other), other)])))
    completed = run_cli(str(result), "--jwks", str(keys))
    assert completed.returncode == 1
    assert "unknown key id" in completed.stderr


def test_malformed_input_is_rejected_with_a_message(signer, tmp_path):
    result, keys = signer.result(), signer.keys
    garbage = tmp_path / "garbage.jwt"
    garbage.write_text("this is not a JWT")
    completed = run_cli(str(garbage), "--jwks", str(keys))
    assert completed.returncode == 1 and "not a JWT" in completed.stderr

    broken_keys = tmp_path / "broken.json"
    broken_keys.write_text("{")
    completed = run_cli(str(result), "--jwks", str(broken_keys))
    assert completed.returncode == 2 and "is not JSON" in completed.stderr

    completed = run_cli(str(tmp_path / "absent.jwt"), "--jwks", str(keys))
    assert completed.returncode == 2 and "absent.jwt" in completed.stderr


def test_the_result_can_come_from_stdin(signer):
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, "-", "--jwks", str(signer.keys)],
        cwd=REPO_ROOT,
        input=signer.result().read_text(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize(
    ("claims", "facts"),
    [
        ({}, []),  # a result signed before firmware baselines, or of a node without one
        ({"firmware": "BIOS 2.4"}, []),
        ({"firmware": {"components": ["BIOS"]}}, []),
        (
            {"firmware": {"components": {"BMC": {"version": "1.5", "digest": "ef"}, "NIC0": 7}, "repaired": ["BMC"]}},
            [("BMC", "1.5", "ef", True)],
        ),
        ({"firmware": {"components": {"BMC": {"version": "1.5"}}, "repaired": "BMC"}}, [("BMC", "1.5", "", False)]),
    ],
)
def test_firmware_facts_are_read_as_far_as_they_are_well_formed_and_never_required(claims, facts):
    assert offline_verification.firmware_facts(claims) == facts
