"""Signed results: EAR claims in an EdDSA JWT, key ids, the JWKS, key loading and rotation."""

from __future__ import annotations

import base64
import datetime
import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpufleet_client.offline_verification import ResultInvalid, verify_result

from attestation import ear
from attestation.verifier import Failure, Verdict

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
NONCE = bytes(range(32))
AFFIRMING = Verdict(affirming=True, failures=(), measurements={"kernel": "ab" * 32})
IMPLANT = Failure("unknown_component_digest", "kernel", "a reference digest of kernel", "cd" * 32)
CONTRAINDICATED = Verdict(affirming=False, failures=(IMPLANT,), measurements={"kernel": "cd" * 32})


def signed(verdict: Verdict, key: Ed25519PrivateKey, kid: str | None = None) -> str:
    kid = kid or ear.key_id(key.public_key())
    return ear.sign_result(
        verdict=verdict, node="node-001", nonce=NONCE, verifier_id="gpu-fleet 1.0", private_key=key, kid=kid, now=NOW
    )


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def keys(key) -> dict:
    return ear.jwks([(ear.key_id(key.public_key()), key.public_key())])


def test_a_contraindicated_result_carries_the_ear_claims_and_every_failure(key, keys):
    claims = verify_result(signed(CONTRAINDICATED, key), keys)
    assert claims["eat_profile"] == "tag:github.com,2023:veraison/ear"
    assert claims["iat"] == int(NOW.timestamp())
    assert claims["ear.verifier-id"] == {"developer": "gpu-fleet", "build": "gpu-fleet 1.0"}
    assert base64.urlsafe_b64decode(claims["eat_nonce"] + "=") == NONCE
    submod = claims["submods"]["node-001"]
    assert submod["ear.status"] == "contraindicated"
    assert submod["ear.trustworthiness-vector"]["executables"] == 96
    assert submod["ear.trustworthiness-vector"]["hardware"] == 2
    assert claims["node"] == "node-001"
    assert claims["failures"] == [
        {"code": "unknown_component_digest", "component": "kernel", "expected": IMPLANT.expected, "found": "cd" * 32}
    ]
    assert claims["measurements"] == {"kernel": "cd" * 32}


FIRMWARE = {
    "baseline": "h100",
    "components": {"BMC": {"version": "GF-BMC 1.5.0", "digest": "ef" * 32}},
    "secure_boot": "Enabled",
    "repaired": ["BMC"],
}


def test_the_firmware_a_check_read_is_signed_as_given_and_absent_without_one(key, keys):
    kid = ear.key_id(key.public_key())
    token = ear.sign_result(
        verdict=AFFIRMING,
        node="node-001",
        nonce=NONCE,
        verifier_id="gpu-fleet 1.0",
        private_key=key,
        kid=kid,
        now=NOW,
        firmware=FIRMWARE,
    )
    assert verify_result(token, keys)["firmware"] == FIRMWARE
    assert "firmware" not in verify_result(signed(AFFIRMING, key), keys)


NETWORKS_AFTER_INSPECTION = {
    "read_at": "2026-11-29T11:59:58+00:00",
    "reservation": None,
    "fabrics": {
        "ethernet": {"membership": "10", "tenant": False, "read_at": "2026-11-29T11:59:58+00:00"},
        "infiniband": {"membership": "", "tenant": False, "read_at": "2026-11-29T11:59:59+00:00"},
        "nvlink": {"membership": "gpufleet-r7", "tenant": True, "read_at": None, "confirmed": False},
    },
}
TENANTS_NETWORKS = {
    "read_at": "2026-11-29T13:00:00+00:00",
    "reservation": 42,
    "fabrics": {"ethernet": {"membership": "1001", "tenant": True, "read_at": "2026-11-29T13:00:00+00:00"}},
}


def test_the_networks_read_back_are_signed_as_given_and_absent_without_them(key, keys):
    token = ear.sign_result(
        verdict=AFFIRMING,
        node="node-001",
        nonce=NONCE,
        verifier_id="gpu-fleet 1.0",
        private_key=key,
        kid=ear.key_id(key.public_key()),
        now=NOW,
        networks=NETWORKS_AFTER_INSPECTION,
    )
    assert verify_result(token, keys)["networks"] == NETWORKS_AFTER_INSPECTION
    assert "networks" not in verify_result(signed(AFFIRMING, key), keys)


def test_a_handoff_signs_the_inspections_verdict_unchanged_with_the_tenants_networks(key, keys):
    inspection = verify_result(
        ear.sign_result(
            verdict=CONTRAINDICATED,
            node="node-001",
            nonce=NONCE,
            verifier_id="gpu-fleet 1.0",
            private_key=key,
            kid=ear.key_id(key.public_key()),
            now=NOW,
            firmware=FIRMWARE,
            networks=NETWORKS_AFTER_INSPECTION,
        ),
        keys,
    )
    an_hour_later = NOW + datetime.timedelta(hours=1)
    handoff = verify_result(
        ear.sign_handoff(
            inspection=inspection,
            networks=TENANTS_NETWORKS,
            private_key=key,
            kid=ear.key_id(key.public_key()),
            now=an_hour_later,
        ),
        keys,
    )
    assert handoff["iat"] == int(an_hour_later.timestamp())
    assert handoff["attested_at"] == int(NOW.timestamp())
    assert handoff["networks"] == TENANTS_NETWORKS
    verdict = {name: value for name, value in handoff.items() if name not in {"iat", "attested_at", "networks"}}
    assert verdict == {name: value for name, value in inspection.items() if name not in {"iat", "networks"}}
    assert verdict["eat_nonce"] == inspection["eat_nonce"] and verdict["firmware"] == FIRMWARE


def test_an_affirming_result_has_an_all_affirming_vector(key, keys):
    claims = verify_result(signed(AFFIRMING, key), keys)
    assert claims["submods"]["node-001"]["ear.status"] == "affirming"
    assert set(claims["submods"]["node-001"]["ear.trustworthiness-vector"].values()) == {2}
    assert claims["failures"] == []


def test_evidence_that_failed_cryptographic_checks_is_trusted_for_nothing():
    forged = Verdict(False, (Failure("quote_signature", "quote.signature", "valid", "invalid"),), {})
    assert set(ear.trustworthiness_vector(forged).values()) == {99}
    garbled = Verdict(False, (Failure("malformed", "quote", "an object", "nothing"),), {})
    assert set(ear.trustworthiness_vector(garbled).values()) == {1}


def test_a_standard_jwt_library_verifies_a_result_with_the_jwks_alone(key, keys):
    token = signed(AFFIRMING, key)
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "EdDSA" and header["kid"] == ear.key_id(key.public_key())
    public_key = jwt.PyJWK(keys["keys"][0]).key
    assert jwt.decode(token, public_key, algorithms=["EdDSA"])["node"] == "node-001"


def test_the_jwks_lists_okp_ed25519_signing_keys_with_their_ids(key, keys):
    (entry,) = keys["keys"]
    assert entry.keys() == {"kty", "crv", "x", "kid", "alg", "use"}
    assert (entry["kty"], entry["crv"], entry["alg"], entry["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")
    assert entry["kid"] == ear.key_id(key.public_key())


def test_the_key_id_is_the_rfc_7638_thumbprint():
    # RFC 8037, appendix A.3: the thumbprint of the example Ed25519 key.
    d = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
    public_key = Ed25519PrivateKey.from_private_bytes(d).public_key()
    assert ear.key_id(public_key) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_a_tampered_result_is_invalid(key, keys):
    header, payload, signature = signed(CONTRAINDICATED, key).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["submods"]["node-001"]["ear.status"] = "affirming"
    claims["failures"] = []
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(ResultInvalid, match="does not verify"):
        verify_result(f"{header}.{forged}.{signature}", keys)


def test_a_result_signed_by_an_unknown_key_is_invalid(key):
    other = Ed25519PrivateKey.generate()
    with pytest.raises(ResultInvalid, match="unknown key id"):
        verify_result(signed(AFFIRMING, other), ear.jwks([(ear.key_id(key.public_key()), key.public_key())]))


def test_a_known_kid_on_a_result_signed_by_another_key_is_invalid(key, keys):
    impostor = Ed25519PrivateKey.generate()
    with pytest.raises(ResultInvalid, match="does not verify"):
        verify_result(signed(AFFIRMING, impostor, kid=ear.key_id(key.public_key())), keys)


def test_a_result_in_another_algorithm_is_invalid(key, keys):
    kid = ear.key_id(key.public_key())
    hmac_token = jwt.encode({"iat": 1, "node": "node-001"}, "secret-" * 8, algorithm="HS256", headers={"kid": kid})
    with pytest.raises(ResultInvalid, match="algorithm 'HS256' is not EdDSA"):
        verify_result(hmac_token, keys)
    unsigned = jwt.encode({"iat": 1}, "", algorithm="none", headers={"kid": kid})  # "": no key, as PyJWT types it
    with pytest.raises(ResultInvalid, match="algorithm 'none'"):
        verify_result(unsigned, keys)


@pytest.mark.parametrize("token", ["", "not a jwt", "a.b.c", "..."])
def test_malformed_results_are_invalid(token, keys):
    with pytest.raises(ResultInvalid):
        verify_result(token, keys)


@pytest.mark.parametrize("jwks", [{}, [], {"keys": "x"}, {"keys": [{"kid": "K", "kty": "OKP", "crv": "Ed25519"}]}])
def test_a_malformed_jwks_makes_the_result_invalid(key, jwks):
    with pytest.raises(ResultInvalid):
        verify_result(signed(AFFIRMING, key, kid="K"), jwks)


def test_signing_keys_load_from_a_file(tmp_path):
    kid, key = ear.generate_signing_key(tmp_path / "signing.pem")
    ((loaded_kid, loaded),) = ear.load_signing_keys(str(tmp_path / "signing.pem"))
    assert loaded_kid == kid == ear.key_id(key.public_key())
    assert loaded.private_bytes_raw() == key.private_bytes_raw()
    assert (tmp_path / "signing.pem").stat().st_mode & 0o777 == 0o600


def test_in_a_key_directory_the_newest_signs_and_older_keys_stay_for_the_jwks(tmp_path):
    old_kid, old_key = ear.generate_signing_key(tmp_path / "2026-01-01.pem")
    token = signed(AFFIRMING, old_key)
    new_kid, _ = ear.generate_signing_key(tmp_path / "2026-11-29.pem")
    loaded = ear.load_signing_keys(str(tmp_path))
    assert [kid for kid, _ in loaded] == [new_kid, old_kid]
    rotated = ear.jwks((kid, private_key.public_key()) for kid, private_key in loaded)
    assert verify_result(token, rotated)["node"] == "node-001"


def test_a_key_is_never_generated_over_an_existing_file(tmp_path):
    ear.generate_signing_key(tmp_path / "signing.pem")
    with pytest.raises(FileExistsError):
        ear.generate_signing_key(tmp_path / "signing.pem")


def test_a_result_signed_in_the_readers_future_still_verifies(key, keys):
    token = ear.sign_result(
        verdict=AFFIRMING,
        node="node-001",
        nonce=NONCE,
        verifier_id="gpu-fleet 1.0",
        private_key=key,
        kid=ear.key_id(key.public_key()),
        now=datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=5),  # a reader's clock behind
    )
    assert verify_result(token, keys)["node"] == "node-001"


def test_unusable_signing_key_settings_are_errors(tmp_path):
    with pytest.raises(ear.SigningKeyError, match="no signing key configured"):
        ear.load_signing_keys("")
    with pytest.raises(ear.SigningKeyError, match="no such signing key"):
        ear.load_signing_keys(str(tmp_path / "absent.pem"))
    with pytest.raises(ear.SigningKeyError, match=r"no \*.pem signing key"):
        ear.load_signing_keys(str(tmp_path))
    (tmp_path / "garbage.pem").write_text("not a key")
    with pytest.raises(ear.SigningKeyError, match="not an unencrypted PEM private key"):
        ear.load_signing_keys(str(tmp_path / "garbage.pem"))
