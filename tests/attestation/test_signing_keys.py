"""The control plane's result-signing keys follow the key files: a rotation needs no restart."""

from __future__ import annotations

import datetime
import os

import pytest
from gpufleet_client.offline_verification import verify_result

from attestation import ear, services
from attestation.verifier import Verdict

AFFIRMING = Verdict(affirming=True, failures=(), measurements={})


def sign() -> tuple[str, str]:
    """A result signed as services.appraise signs it: with the first of the signing keys. Returns (kid, token)."""
    kid, key = services.signing_keys()[0]
    token = ear.sign_result(
        verdict=AFFIRMING,
        node="node-001",
        nonce=bytes(32),
        verifier_id=services.VERIFIER_ID,
        private_key=key,
        kid=kid,
        now=datetime.datetime.now(datetime.UTC),
    )
    return kid, token


def served_kids() -> list[str]:
    return [entry["kid"] for entry in services.public_keys()["keys"]]


def test_a_key_added_to_the_key_directory_signs_next_and_joins_the_jwks_without_a_restart(settings, tmp_path):
    old_kid, _ = ear.generate_signing_key(tmp_path / "2026-01-01.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)
    assert sign()[0] == old_kid
    _, before_rotation = sign()

    new_kid, _ = ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    kid, after_rotation = sign()
    assert kid == new_kid
    assert served_kids() == [new_kid, old_kid]
    for token in (before_rotation, after_rotation):
        assert verify_result(token, services.public_keys())["node"] == "node-001"


def test_a_key_removed_from_the_directory_leaves_the_jwks(settings, tmp_path):
    old_kid, _ = ear.generate_signing_key(tmp_path / "2026-01-01.pem")
    new_kid, _ = ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)
    assert served_kids() == [new_kid, old_kid]
    (tmp_path / "2026-01-01.pem").unlink()
    assert served_kids() == [new_kid]


def test_a_key_file_replaced_in_place_is_read_again(settings, tmp_path):
    old_kid, _ = ear.generate_signing_key(tmp_path / "signing.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path / "signing.pem")
    assert sign()[0] == old_kid
    new_kid, _ = ear.generate_signing_key(tmp_path / "next.tmp")
    os.replace(tmp_path / "next.tmp", tmp_path / "signing.pem")  # as a Kubernetes secret or a config tool does
    assert sign()[0] == new_kid
    assert served_kids() == [new_kid]


def test_a_key_directory_emptied_is_not_configured_until_a_key_is_back(settings, tmp_path):
    kid, _ = ear.generate_signing_key(tmp_path / "2026-01-01.pem")
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path)
    assert sign()[0] == kid
    (tmp_path / "2026-01-01.pem").rename(tmp_path / "2026-01-01.pem.retired")
    with pytest.raises(services.NotConfigured, match=r"no \*.pem signing key"):
        services.signing_keys()
    (tmp_path / "2026-01-01.pem.retired").rename(tmp_path / "2026-01-01.pem")
    assert sign()[0] == kid
