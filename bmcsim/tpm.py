"""TPM 2.0 structures, marshalled big-endian as a TPM does (TPM 2.0 Library, Part 2).

Only what a quote needs: the AK's TPMT_PUBLIC (to compute its Name), TPMS_ATTEST of type
TPM_ST_ATTEST_QUOTE, and PCR extension.
"""

from __future__ import annotations

import hashlib
import struct

from cryptography.hazmat.primitives.asymmetric import ec

TPM_GENERATED_VALUE = 0xFF544347
TPM_ST_ATTEST_QUOTE = 0x8018
TPM_ALG_SHA256 = 0x000B
TPM_ALG_ECC = 0x0023
TPM_ALG_ECDSA = 0x0018
TPM_ALG_NULL = 0x0010
TPM_ECC_NIST_P256 = 0x0003
# fixedTPM | fixedParent | sensitiveDataOrigin | userWithAuth | restricted | sign: an attestation key.
AK_OBJECT_ATTRIBUTES = 0x00050072
PCR_SELECT_BYTES = 3  # 24 PCRs
ZERO_PCR = bytes(32)


def tpm2b(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def extend(pcr: bytes, digest: bytes) -> bytes:
    """PCR_new = SHA256(PCR_old || digest)."""
    return hashlib.sha256(pcr + digest).digest()


def ecc_public_area(public_key: ec.EllipticCurvePublicKey) -> bytes:
    """TPMT_PUBLIC of a restricted ECDSA-P256 signing key."""
    numbers = public_key.public_numbers()
    return (
        struct.pack(">HHI", TPM_ALG_ECC, TPM_ALG_SHA256, AK_OBJECT_ATTRIBUTES)
        + tpm2b(b"")  # authPolicy
        + struct.pack(">HHHHH", TPM_ALG_NULL, TPM_ALG_ECDSA, TPM_ALG_SHA256, TPM_ECC_NIST_P256, TPM_ALG_NULL)
        + tpm2b(numbers.x.to_bytes(32, "big"))
        + tpm2b(numbers.y.to_bytes(32, "big"))
    )


def object_name(public_key: ec.EllipticCurvePublicKey) -> bytes:
    """TPM2B_NAME content: nameAlg followed by the hash of the public area."""
    return struct.pack(">H", TPM_ALG_SHA256) + hashlib.sha256(ecc_public_area(public_key)).digest()


def pcr_selection(pcrs: tuple[int, ...]) -> bytes:
    """TPML_PCR_SELECTION with one TPMS_PCR_SELECTION for the SHA-256 bank."""
    bitmap = bytearray(PCR_SELECT_BYTES)
    for pcr in pcrs:
        bitmap[pcr // 8] |= 1 << (pcr % 8)
    return struct.pack(">IHB", 1, TPM_ALG_SHA256, PCR_SELECT_BYTES) + bytes(bitmap)


def quote_attest(
    *,
    signer_name: bytes,
    nonce: bytes,
    clock_ms: int,
    reset_count: int,
    restart_count: int,
    firmware_version: int,
    pcrs: dict[int, bytes],
) -> bytes:
    """TPMS_ATTEST for a quote of `pcrs` (ascending index order, as the selection bitmap orders them)."""
    selected = tuple(sorted(pcrs))
    pcr_digest = hashlib.sha256(b"".join(pcrs[i] for i in selected)).digest()
    return (
        struct.pack(">IH", TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE)
        + tpm2b(signer_name)
        + tpm2b(nonce)
        + struct.pack(">QIIB", clock_ms, reset_count, restart_count, 1)  # TPMS_CLOCK_INFO, safe = YES
        + struct.pack(">Q", firmware_version)
        + pcr_selection(selected)
        + tpm2b(pcr_digest)
    )
