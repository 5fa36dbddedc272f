"""Tenants' OpenSSH public keys: parsed, checked and fingerprinted as ssh-keygen does.

Pure: no Django. A key is one line, "<type> <base64 blob> [comment]"; the blob must decode to
a key of the type it names, and RSA keys must have at least 2048 bits (OpenSSH's own floor
for new keys since 9.x is higher still, but 2048 is what clouds accept).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
MIN_RSA_BITS = 2048
MAX_KEY_CHARS = 16 * 1024


class BadKey(ValueError):
    pass


@dataclass(frozen=True)
class PublicKey:
    line: str  # type, blob and comment, on one line, as authorized_keys holds it
    fingerprint: str  # "SHA256:<unpadded base64>"


def parse(text: str) -> PublicKey:
    text = text.strip()
    if len(text) > MAX_KEY_CHARS:
        raise BadKey(f"a public key is at most {MAX_KEY_CHARS} characters")
    if "\n" in text or "\r" in text:
        raise BadKey("one key per entry: the text holds more than one line")
    kind, _, rest = text.partition(" ")
    blob_text, _, comment = rest.strip().partition(" ")
    if kind not in TYPES:
        raise BadKey(f"the key type must be one of {', '.join(TYPES)}; got {kind[:40]!r}")
    try:
        blob = base64.b64decode(blob_text, validate=True)
        key = load_ssh_public_key(f"{kind} {blob_text}".encode())
    except (binascii.Error, ValueError, UnsupportedAlgorithm):
        raise BadKey(f"not an OpenSSH {kind} public key: the key data does not decode") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise BadKey(f"an RSA key needs at least {MIN_RSA_BITS} bits; this one has {key.key_size}")
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    line = " ".join(part for part in (kind, blob_text, comment.strip()) if part)
    return PublicKey(line=line, fingerprint=f"SHA256:{digest}")
