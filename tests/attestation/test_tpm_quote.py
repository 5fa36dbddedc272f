"""Our quote checker against a real TPM 2.0: swtpm in socket mode, driven by tpm2-tools.

Needs the Debian packages swtpm, swtpm-tools and tpm2-tools; without them this test fails, it
never skips (tests/support/swtpm.py).
"""

from __future__ import annotations

import hashlib
import os

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from attestation.verifier import verify_quote
from tests.support.swtpm import SoftwareTPM

PCR = 16  # the debug PCR: resettable, so each quote starts from zeros
MEASUREMENT = hashlib.sha256(b"vmlinuz-6.8.0-49-generic").digest()


@pytest.fixture(scope="module")
def software_tpm(tmp_path_factory):
    tpm = SoftwareTPM(tmp_path_factory.mktemp("swtpm"))
    yield tpm
    tpm.stop()


KEY_KINDS = {"ecc": "ecdsa", "rsa": "rsassa"}


@pytest.fixture(scope="module", params=sorted(KEY_KINDS))
def quote(request, software_tpm):
    """An AK of one kind, PCR 16 reset and extended once, and a quote of it over a fresh nonce."""
    kind = request.param
    software_tpm.run("tpm2_createek", "-c", f"ek-{kind}.ctx", "-G", kind, "-u", f"ek-{kind}.pub")
    software_tpm.run(
        "tpm2_createak", "-C", f"ek-{kind}.ctx", "-c", f"ak-{kind}.ctx", "-G", kind, "-g", "sha256",
        "-s", KEY_KINDS[kind], "-u", f"ak-{kind}.pem", "-f", "pem", "-n", f"ak-{kind}.name",
    )  # fmt: skip
    software_tpm.run("tpm2_pcrreset", str(PCR))
    software_tpm.run("tpm2_pcrextend", f"{PCR}:sha256={MEASUREMENT.hex()}")
    nonce = os.urandom(32)
    software_tpm.run(
        "tpm2_quote", "-c", f"ak-{kind}.ctx", "-l", f"sha256:{PCR}", "-q", nonce.hex(), "-g", "sha256",
        "-m", f"attest-{kind}.bin", "-s", f"signature-{kind}.bin",
    )  # fmt: skip
    directory = software_tpm.directory
    return {
        "attest": (directory / f"attest-{kind}.bin").read_bytes(),
        "signature": (directory / f"signature-{kind}.bin").read_bytes(),  # a TPMT_SIGNATURE
        "public_key": load_pem_public_key((directory / f"ak-{kind}.pem").read_bytes()),
        "nonce": nonce,
        "pcrs": {PCR: hashlib.sha256(bytes(32) + MEASUREMENT).digest()},  # the replayed value
    }


def test_a_real_tpm_quote_verifies_signature_nonce_and_pcr_digest(quote):
    parsed, failures = verify_quote(
        quote["attest"], quote["signature"], quote["public_key"], quote["nonce"], pcrs=quote["pcrs"]
    )
    assert failures == [] and parsed is not None
    assert parsed.extra_data == quote["nonce"]
    assert parsed.pcr_select == ((0x000B, (PCR,)),)


def test_a_one_byte_change_in_the_real_quote_is_rejected(quote):
    attest = bytearray(quote["attest"])
    attest[-1] ^= 0x01  # the last byte of the PCR digest
    _, failures = verify_quote(
        bytes(attest), quote["signature"], quote["public_key"], quote["nonce"], pcrs=quote["pcrs"]
    )
    assert {f.code for f in failures} == {"quote_signature", "pcr_digest"}


def test_a_one_byte_change_in_the_real_signature_is_rejected(quote):
    signature = bytearray(quote["signature"])
    signature[-1] ^= 0x01
    _, failures = verify_quote(quote["attest"], bytes(signature), quote["public_key"], quote["nonce"])
    assert [f.code for f in failures] == ["quote_signature"]


def test_the_real_quote_with_another_nonce_or_pcr_value_is_rejected(quote):
    _, failures = verify_quote(
        quote["attest"], quote["signature"], quote["public_key"], os.urandom(32), pcrs={PCR: bytes(32)}
    )
    assert [f.code for f in failures] == ["nonce_mismatch", "pcr_digest"]
