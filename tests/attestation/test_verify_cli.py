"""`python -m attestation.verify RESULT.jwt --jwks KEYS.json`, run as a subprocess the way a tenant would."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation import ear
from attestation.verifier import Failure, Verdict
from tests.support import REPO_ROOT

IMPLANT = Failure("unknown_component_digest", "kernel", "a reference digest of kernel", "cd" * 32)
# Run the CLI with Django made unimportable: it must need only PyJWT and cryptography.
WITHOUT_DJANGO = (
    "import runpy, sys; sys.modules['django'] = None; sys.argv[0] = 'attestation.verify';"
    " runpy.run_module('attestation.verify', run_name='__main__')"
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def signed_result(tmp_path) -> tuple[Path, Path, Ed25519PrivateKey]:
    kid, key = ear.generate_signing_key(tmp_path / "signing.pem")
    token = ear.sign_result(
        verdict=Verdict(False, (IMPLANT,), {"kernel": "cd" * 32}),
        node="node-001",
        nonce=bytes(32),
        verifier_id="gpu-fleet test",
        private_key=key,
        kid=kid,
        now=datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC),
    )
    result, keys = tmp_path / "result.jwt", tmp_path / "keys.json"
    result.write_text(token + "\n")
    keys.write_text(json.dumps(ear.jwks([(kid, key.public_key())])))
    return result, keys, key


def test_a_genuine_result_verifies_and_its_claims_are_printed(signed_result):
    result, keys, _ = signed_result
    completed = run_cli(str(result), "--jwks", str(keys))
    assert completed.returncode == 0, completed.stderr
    claims = json.loads(completed.stdout)
    assert claims["submods"]["node-001"]["ear.status"] == "contraindicated"
    assert claims["failures"][0]["component"] == "kernel"


def test_a_tampered_result_is_rejected(signed_result):
    result, keys, _ = signed_result
    header, payload, signature = result.read_text().strip().split(".")
    result.write_text(f"{header}.{payload[:-2]}{'AA' if payload[-2:] != 'AA' else 'BB'}.{signature}")
    completed = run_cli(str(result), "--jwks", str(keys))
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert "invalid result" in completed.stderr


def test_a_result_from_an_unknown_key_is_rejected(signed_result, tmp_path):
    result, _, _ = signed_result
    other = Ed25519PrivateKey.generate().public_key()
    keys = tmp_path / "other-keys.json"
    keys.write_text(json.dumps(ear.jwks([(ear.key_id(other), other)])))
    completed = run_cli(str(result), "--jwks", str(keys))
    assert completed.returncode == 1
    assert "unknown key id" in completed.stderr


def test_malformed_input_is_rejected_with_a_message(signed_result, tmp_path):
    result, keys, _ = signed_result
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


def test_the_result_can_come_from_stdin(signed_result):
    result, keys, _ = signed_result
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO, "-", "--jwks", str(keys)],
        cwd=REPO_ROOT,
        input=result.read_text(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 0, completed.stderr
