"""The GPUs' signed reports: each read into well-formed fields, and its device signature checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.verifier.chains import pem_chain
from attestation.verifier.fields import (
    MAX_CHAIN_CERTS,
    MAX_GPUS,
    MAX_MEASUREMENTS,
    MAX_SIGNATURE_BYTES,
    base64_bytes,
    name_text,
)
from core import validation

GPU_INDEX = f"a GPU index from 0 to {MAX_GPUS - 1}"


@dataclass(frozen=True)
class GPUReport:
    """A GPU report's fields, each well-formed (not yet checked against anything)."""

    uuid: str
    nonce: str
    cc_mode: str
    measurements: Mapping[str, str]
    signature: bytes
    chain: tuple[str, ...]
    signed: bytes  # what the device key signed


def read_gpu_report(report: Mapping[str, object], where: str) -> GPUReport:
    """Raises validation.Invalid, naming the place, for a field off its shape."""
    uuid = name_text(report.get("uuid"), f"{where}.uuid")
    nonce = name_text(report.get("nonce"), f"{where}.nonce", limit=2 * 64)
    cc_mode = name_text(report.get("cc_mode"), f"{where}.cc_mode")
    measurements = {
        name_text(name, f"{where}.measurements"): name_text(value, f"{where}.measurements.{name}", limit=128)
        for name, value in validation.mapping(
            report.get("measurements"),
            f"{where}.measurements",
            max_items=MAX_MEASUREMENTS,
            expected="an object of name -> digest",
        ).items()
    }
    signature = base64_bytes(report.get("signature"), f"{where}.signature", MAX_SIGNATURE_BYTES)
    chain_pems = validation.sequence(
        report.get("cert_chain"),
        f"{where}.cert_chain",
        min_items=1,
        max_items=MAX_CHAIN_CERTS,
        expected=f"a list of 1 to {MAX_CHAIN_CERTS} PEM certificates",
    )
    chain = pem_chain(chain_pems, [f"{where}.cert_chain[{i}]" for i in range(len(chain_pems))])
    try:
        signed = canonical_gpu_report(report)
    except (TypeError, ValueError, RecursionError) as err:
        raise validation.Invalid(where, "must be a report of JSON values", str(err)) from None
    return GPUReport(uuid, nonce, cc_mode, measurements, signature, chain, signed)


def canonical_gpu_report(report: Mapping[str, object]) -> bytes:
    """What the device signed: the report without signature and chain, sorted compact JSON."""
    unsigned = {k: v for k, v in report.items() if k not in ("signature", "cert_chain")}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def verifies_p384(public_key: object, signature: bytes, message: bytes) -> bool:
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(public_key.curve, ec.SECP384R1):
        return False
    try:
        public_key.verify(signature, message, ec.ECDSA(hashes.SHA384()))
    except InvalidSignature:
        return False
    return True
