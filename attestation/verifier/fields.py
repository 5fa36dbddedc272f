"""The evidence's fields: the bounds on what an agent may send, and parsers that each raise
core.validation.Invalid naming where, which the appraisal makes a `malformed` failure."""

from __future__ import annotations

import base64
import binascii
import re

from attestation.verifier.verdict import shown
from core import validation

# Bounds on what an agent may send; anything bigger is malformed, not merely slow.
MAX_ATTEST_BYTES = 1024
MAX_SIGNATURE_BYTES = 1024
MAX_PEM_CHARS = 8192
MAX_CHAIN_CERTS = 4
MAX_EVENTS = 1024
MAX_GPUS = 64
MAX_MEASUREMENTS = 16
MAX_NAME_CHARS = 64
# NVIDIA's SPDM evidence (spdm.py): a GET_MEASUREMENTS request and its signed MEASUREMENTS
# response (about 4 KiB for 64 SHA-384 blocks), and the device's certificate chain, leaf to root.
MAX_SPDM_REPORT_BYTES = 32768
MAX_SPDM_CHAIN_CERTS = 8
# NVIDIA's RIMs (gpu_rims.py): signed SWID tags of about 21 KiB, 64 measurements of at most 4
# alternatives, signed by a chain of 4 certificates (NVIDIA's verifier allows 5).
MAX_RIM_BYTES = 262144
MAX_RIM_MEASUREMENTS = 254  # indexes 0 to 253: SPDM's block indexes 1 to 254, less one
MAX_RIM_ALTERNATIVES = 16
MAX_RIM_CERTS = 5


def base64_bytes(value: object, where: str, limit: int) -> bytes:
    encoded = validation.text(value, where, max_length=2 * limit, expected=f"base64 of at most {limit} bytes")
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        raise validation.Invalid(where, "must be base64", str(err)) from None
    if not decoded or len(decoded) > limit:
        raise validation.Invalid(where, f"must be base64 of 1 to {limit} bytes", f"{len(decoded)} bytes")
    return decoded


def hex_bytes(value: object, where: str, size: int) -> bytes:
    return bytes.fromhex(
        validation.matches(value, where, re.compile(f"[0-9a-fA-F]{{{2 * size}}}"), f"{2 * size} hex digits")
    )


def name_text(value: object, where: str, limit: int = MAX_NAME_CHARS) -> str:
    return validation.text(value, where, max_length=limit)


def describe(value: object) -> str:
    """A value off its shape, as a failure shows what was found."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list | dict):  # too many, or too few, of them
        return f"a list of {len(value)} items" if isinstance(value, list) else f"an object of {len(value)} entries"
    kinds = {type(None): "nothing", bool: "a boolean", int: "a number"}
    return kinds.get(type(value), f"a {type(value).__name__}")
