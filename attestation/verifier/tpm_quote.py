"""The TPM 2.0 quote: a TPMS_ATTEST parsed, its AK signature checked, its nonce and PCR digest
compared."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from attestation.verifier.verdict import Failure, shown

# TPM 2.0 Library, Part 2.
TPM_GENERATED_VALUE = 0xFF544347
TPM_ST_ATTEST_QUOTE = 0x8018
TPM_ALG_SHA256 = 0x000B
TPM_ALG_RSASSA = 0x0014
TPM_ALG_ECDSA = 0x0018


@dataclass(frozen=True)
class Quote:
    """A parsed TPMS_ATTEST of type TPM_ST_ATTEST_QUOTE."""

    magic: int
    type: int
    qualified_signer: bytes
    extra_data: bytes
    clock: int
    reset_count: int
    restart_count: int
    safe: bool
    firmware_version: int
    pcr_select: tuple[tuple[int, tuple[int, ...]], ...]  # (hash algorithm, PCR indexes) per bank
    pcr_digest: bytes


def verify_quote(
    attest: bytes,
    signature: bytes,
    public_key: object | None,
    nonce: bytes,
    *,
    pcrs: Mapping[int, bytes] | None = None,
) -> tuple[Quote | None, list[Failure]]:
    """Check a TPM 2.0 quote alone: format, AK signature, nonce, and (given `pcrs`) selection and digest.

    `public_key` is the AK's: ECDSA P-256 or RSA (RSASSA-PKCS1-v1_5), both with SHA-256; None
    when the AK is unknown (its certificate chain failed), and then the signature is not checked.
    `signature` is a TPMT_SIGNATURE as tpm2_quote writes it, or a plain signature (DER or
    r||s for ECDSA, the raw block for RSA).
    """
    failures: list[Failure] = []
    quote = _parse_quote(attest, failures)
    if public_key is not None:
        _check_quote_signature(attest, signature, public_key, failures)
    if quote is not None:
        _check_quote_contents(quote, nonce, pcrs, failures)
    return quote, failures


class _Reader:
    """Big-endian reader of TPM 2.0 marshalled structures."""

    def __init__(self, data: bytes):
        self.data, self.offset = data, 0

    def take(self, size: int) -> bytes:
        chunk = self.data[self.offset : self.offset + size]
        if len(chunk) != size:
            raise ValueError(f"ends at byte {len(self.data)}, inside a field")
        self.offset += size
        return chunk

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def tpm2b(self) -> bytes:
        return self.take(self.uint(2))


def _parse_quote(attest: bytes, failures: list[Failure]) -> Quote | None:
    reader = _Reader(attest)
    try:
        magic, kind = reader.uint(4), reader.uint(2)
        if magic != TPM_GENERATED_VALUE or kind != TPM_ST_ATTEST_QUOTE:
            expected = f"magic {TPM_GENERATED_VALUE:#x}, type {TPM_ST_ATTEST_QUOTE:#x} (a quote)"
            failures.append(Failure("quote_format", "quote.attest", expected, f"magic {magic:#x}, type {kind:#x}"))
            return None
        signer, extra_data = reader.tpm2b(), reader.tpm2b()
        clock, reset_count, restart_count, safe = reader.uint(8), reader.uint(4), reader.uint(4), reader.uint(1)
        firmware_version = reader.uint(8)
        banks = []
        for _ in range(reader.uint(4)):
            hash_alg = reader.uint(2)
            bitmap = reader.take(reader.uint(1))
            banks.append((hash_alg, tuple(i for i in range(8 * len(bitmap)) if bitmap[i // 8] >> (i % 8) & 1)))
        pcr_digest = reader.tpm2b()
        if reader.offset != len(attest):
            raise ValueError(f"{len(attest) - reader.offset} bytes after the structure")
    except ValueError as err:
        failures.append(Failure("quote_format", "quote.attest", "a complete TPMS_ATTEST", str(err)))
        return None
    return Quote(
        magic=magic,
        type=kind,
        qualified_signer=signer,
        extra_data=extra_data,
        clock=clock,
        reset_count=reset_count,
        restart_count=restart_count,
        safe=bool(safe),
        firmware_version=firmware_version,
        pcr_select=tuple(banks),
        pcr_digest=pcr_digest,
    )


def _check_quote_signature(attest: bytes, signature: bytes, public_key: object, failures: list[Failure]) -> None:
    def fail(found: str) -> None:
        failures.append(Failure("quote_signature", "quote.signature", "a valid signature by the AK", found))

    if isinstance(public_key, ec.EllipticCurvePublicKey) and isinstance(public_key.curve, ec.SECP256R1):
        der = _ecdsa_der(signature, 32)
        if der is None:
            return fail("an ECDSA signature in no known encoding")
        try:
            public_key.verify(der, attest, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            fail("invalid")
    elif isinstance(public_key, rsa.RSAPublicKey):
        raw = _rsassa_raw(signature)
        if raw is None:
            return fail("an RSASSA signature in no known encoding")
        try:
            public_key.verify(raw, attest, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            fail("invalid")
    else:
        fail(f"an AK of an unsupported kind ({type(public_key).__name__}); ECDSA P-256 or RSA expected")


def _ecdsa_der(signature: bytes, coordinate_bytes: int) -> bytes | None:
    """A TPMT_SIGNATURE (ECDSA, SHA-256), a DER Ecdsa-Sig-Value, or r||s, as DER."""
    if signature[:4] == struct.pack(">HH", TPM_ALG_ECDSA, TPM_ALG_SHA256):
        reader = _Reader(signature[4:])
        try:
            r_bytes, s_bytes = reader.tpm2b(), reader.tpm2b()
        except ValueError:
            return None
        if reader.offset != len(signature) - 4:
            return None
        return encode_dss_signature(int.from_bytes(r_bytes, "big"), int.from_bytes(s_bytes, "big"))
    try:
        r, s = decode_dss_signature(signature)
    except ValueError:
        pass
    else:
        if encode_dss_signature(r, s) == signature:
            return signature
    if len(signature) == 2 * coordinate_bytes:
        half = coordinate_bytes
        return encode_dss_signature(int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big"))
    return None


def _rsassa_raw(signature: bytes) -> bytes | None:
    """A TPMT_SIGNATURE (RSASSA, SHA-256) or the plain signature block."""
    if signature[:4] == struct.pack(">HH", TPM_ALG_RSASSA, TPM_ALG_SHA256):
        reader = _Reader(signature[4:])
        try:
            raw = reader.tpm2b()
        except ValueError:
            return None
        return raw if reader.offset == len(signature) - 4 else None
    return signature or None


def _check_quote_contents(
    quote: Quote, nonce: bytes, pcrs: Mapping[int, bytes] | None, failures: list[Failure]
) -> None:
    if quote.extra_data != nonce:
        failures.append(Failure("nonce_mismatch", "quote.attest", nonce.hex(), shown(quote.extra_data.hex())))
    if pcrs is None:
        return
    wanted = ((TPM_ALG_SHA256, tuple(sorted(pcrs))),)
    selected = tuple((alg, pcrs_) for alg, pcrs_ in quote.pcr_select if pcrs_)
    if selected != wanted:
        failures.append(
            Failure("pcr_selection", "quote.attest", _selection_text(wanted), shown(_selection_text(selected)))
        )
        return  # a digest over other PCRs cannot be compared with the replay
    digest = hashlib.sha256(b"".join(pcrs[i] for i in sorted(pcrs))).digest()
    if digest != quote.pcr_digest:
        failures.append(Failure("pcr_digest", "quote.attest", digest.hex(), shown(quote.pcr_digest.hex())))


def _selection_text(banks: tuple[tuple[int, tuple[int, ...]], ...]) -> str:
    names = {TPM_ALG_SHA256: "sha256"}
    return "; ".join(f"{names.get(alg, hex(alg))}:{','.join(map(str, pcrs))}" for alg, pcrs in banks) or "none"
