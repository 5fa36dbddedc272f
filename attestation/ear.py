"""Signed attestation results: an EAT Attestation Result (IETF RATS EAR draft) as an EdDSA JWT.

Claims::

    {"eat_profile": "tag:github.com,2023:veraison/ear", "iat": <seconds>,
     "ear.verifier-id": {"developer": "gpu-fleet", "build": <verifier id>},
     "eat_nonce": <base64url of the nonce>,
     "submods": {<node>: {"ear.status": "affirming" | "contraindicated",
                          "ear.trustworthiness-vector": {<AR4SI claim>: <value>, ...}}},
     "node": <node>, "failures": [{"code", "component", "expected", "found"}, ...],
     "measurements": {<component>: <hex digest>, ...},
     "gpus": [{"index", "uuid", "gpu_evidence": {"source": "in_band" | "out_of_band",
               "status": "affirming" | "contraindicated" | "unavailable", "failures": [...],
               "versions": {"driver", "vbios"}}}, ...],
     "firmware": {"baseline": <name>, "components": {<component>: {"version", "digest"}, ...},
                  "secure_boot": "Enabled", "repaired": [<component>, ...]},
     "networks": {"read_at": <ISO time>, "reservation": <id> | null,
                  "fabrics": {<fabric>: {"membership": "1001", "tenant": true, "read_at": <ISO time>}, ...}}}

`gpus` has an entry for each GPU and each source of SPDM evidence the policy required of it: the
node's agent (`in_band`) or its BMC (`out_of_band`), and what that evidence came to; its failures
are also among the result's `failures`.

`firmware` is what the control plane's firmware check read through the node's BMC (Redfish) at
that inspection, and what it repaired there; a result of a node without a firmware baseline, or
signed before there were any, has none.

`networks` is each fabric's membership of the node (fleet/networks.py's spelling: an access VLAN,
full-member P_Keys, an NVLink partition) as the control plane last read it back from the fabric's
manager, and whether it is a tenant's network; a fabric whose membership was not confirmed by that
read says `"confirmed": false`. An inspection's result carries the memberships after the previous
tenant was taken off; a handoff's (`sign_handoff`) carries the inspection's verdict unchanged,
with its `iat` as `attested_at`, and the memberships of the tenant's networks it is handed on.

The JWT header carries `kid`, the RFC 7638 thumbprint of the signing key, so anyone holding
the JWKS can verify a result offline with any JWT library; gpufleet_client.offline_verification
is ours (the API, `python -m attestation.verify` and `gpufleet verify` use it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from gpufleet_client.offline_verification import ALGORITHM
from jwt.algorithms import OKPAlgorithm

from .verifier import Failure, Verdict

EAR_PROFILE = "tag:github.com,2023:veraison/ear"
VERIFIER_DEVELOPER = "gpu-fleet"

# AR4SI trustworthiness claim values (draft-ietf-rats-ar4si).
AFFIRMING = 2
CONTRAINDICATED = 96
CRYPTO_VALIDATION_FAILED = 99
UNEXPECTED_EVIDENCE = 1

# Failures that mean the evidence itself cannot be trusted: nothing it says counts for any claim.
EVIDENCE_INTEGRITY = {
    "stale",
    "ak_chain",
    "quote_format",
    "quote_signature",
    "nonce_mismatch",
    "pcr_selection",
    "pcr_digest",
    "gpu_chain",
    "gpu_signature",
    "gpu_nonce",
    "gpu_revocation",
}
UNPARSEABLE = {"malformed", "verifier_error"}
# Which AR4SI claim each appraisal failure contraindicates.
CLAIM_OF = {
    "ak_identity": "instance-identity",
    "gpu_identity": "instance-identity",
    "gpu_inventory": "instance-identity",
    "gpu_evidence": "hardware",
    "gpu_rim": "executables",
    "unexpected_event": "executables",
    "missing_component": "executables",
    "unknown_component_digest": "executables",
    "gpu_measurement": "executables",
    "release_retired": "executables",
    "release_not_pinned": "executables",
    "cc_mode": "configuration",
    "secure_boot_off": "configuration",
}
CLAIMS = ("instance-identity", "configuration", "executables", "hardware")
# What a handoff's result says of its own moment, not taken over from the inspection's.
HANDOFF_OWN_CLAIMS = {"iat", "attested_at", "networks"}


class SigningKeyError(ValueError):
    """The signing-key setting names no usable Ed25519 key."""


def trustworthiness_vector(verdict: Verdict) -> dict[str, int]:
    codes = {failure.code for failure in verdict.failures}
    if codes & UNPARSEABLE:
        return dict.fromkeys(CLAIMS, UNEXPECTED_EVIDENCE)
    if codes & EVIDENCE_INTEGRITY:
        return dict.fromkeys(CLAIMS, CRYPTO_VALIDATION_FAILED)
    contraindicated = {CLAIM_OF[code] for code in codes}
    return {claim: CONTRAINDICATED if claim in contraindicated else AFFIRMING for claim in CLAIMS}


def sign_result(
    *,
    verdict: Verdict,
    node: str,
    nonce: bytes,
    verifier_id: str,
    private_key: Ed25519PrivateKey,
    kid: str,
    now: datetime,
    firmware: Mapping[str, object] | None = None,
    networks: Mapping[str, object] | None = None,
) -> str:
    claims: dict[str, object] = {
        "eat_profile": EAR_PROFILE,
        "iat": int(now.timestamp()),
        "ear.verifier-id": {"developer": VERIFIER_DEVELOPER, "build": verifier_id},
        "eat_nonce": _b64url(nonce),
        "submods": {
            node: {
                "ear.status": "affirming" if verdict.affirming else "contraindicated",
                "ear.trustworthiness-vector": trustworthiness_vector(verdict),
            }
        },
        "node": node,
        "failures": [_failure(f) for f in verdict.failures],
        "measurements": dict(verdict.measurements),
        "gpus": gpu_evidence_claim(verdict),
    }
    if firmware is not None:
        claims["firmware"] = firmware
    if networks is not None:
        claims["networks"] = networks
    return jwt.encode(claims, private_key, algorithm=ALGORITHM, headers={"kid": kid})


def gpu_evidence_claim(verdict: Verdict) -> list[dict[str, object]]:
    """The `gpus` claim: an entry per GPU and source of SPDM evidence the policy required."""
    return [
        {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "gpu_evidence": {
                "source": gpu.source,
                "status": gpu.status,
                "failures": [_failure(f) for f in gpu.failures],
                "versions": dict(gpu.versions),
            },
        }
        for gpu in verdict.gpu_evidence
    ]


def _failure(failure: Failure) -> dict[str, str]:
    return {"code": failure.code, "component": failure.component, "expected": failure.expected, "found": failure.found}


def sign_handoff(
    *,
    inspection: Mapping[str, object],
    networks: Mapping[str, object],
    private_key: Ed25519PrivateKey,
    kid: str,
    now: datetime,
) -> str:
    """A result for the node's handoff to a tenant: the claims of its inspection's result (verified
    by the caller) as they were signed, verdict, nonce and firmware alike, so that nothing is judged
    again; signed now, with the inspection's `iat` as `attested_at` and the networks read back now."""
    claims = {name: value for name, value in inspection.items() if name not in HANDOFF_OWN_CLAIMS}
    claims.update(iat=int(now.timestamp()), attested_at=inspection["iat"], networks=networks)
    return jwt.encode(claims, private_key, algorithm=ALGORITHM, headers={"kid": kid})


def jwks(keys: Iterable[tuple[str, Ed25519PublicKey]]) -> dict[str, list[dict[str, str]]]:
    return {"keys": [{**_jwk(public_key), "kid": kid, "alg": ALGORITHM, "use": "sig"} for kid, public_key in keys]}


def key_id(public_key: Ed25519PublicKey) -> str:
    """RFC 7638 JWK thumbprint: SHA-256 over the required members in lexicographic order (PyJWT has no helper)."""
    members = json.dumps(_jwk(public_key), separators=(",", ":"))
    return _b64url(hashlib.sha256(members.encode()).digest())


def load_signing_keys(spec: str) -> list[tuple[str, Ed25519PrivateKey]]:
    """Keys from a PEM file, or from a directory of `*.pem` files.

    In a directory the newest key signs: name the files so they sort by age (for example
    `2026-11-29.pem`); the last in name order is first in the returned list, and the older
    ones stay in the JWKS so results they signed still verify.
    """
    keys = []
    for file in _signing_key_files(spec):
        try:
            key = serialization.load_pem_private_key(file.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as err:
            raise SigningKeyError(f"{file}: not an unencrypted PEM private key: {err}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(f"{file}: not an Ed25519 key")
        keys.append((key_id(key.public_key()), key))
    return keys


def signing_key_files_version(spec: str) -> tuple[tuple[str, int, int, int], ...]:
    """What changes when a key file is added, removed or replaced: each file's name, inode, mtime and size.

    Links are followed, so a Kubernetes secret volume (whose files are links into a directory
    that an update swaps) changes version when the secret does.
    """
    version = []
    for file in _signing_key_files(spec):
        try:
            stat = file.stat()
        except OSError as err:  # removed since the listing, or a dangling link
            raise SigningKeyError(f"{file}: {err.strerror}") from None
        version.append((file.name, stat.st_ino, stat.st_mtime_ns, stat.st_size))
    return tuple(version)


def _signing_key_files(spec: str) -> list[Path]:
    """The key files, newest first."""
    if not spec.strip():
        raise SigningKeyError("no signing key configured: set a PEM file or a directory of them")
    path = Path(spec)
    if path.is_dir():
        files = sorted(path.glob("*.pem"), reverse=True)
        if not files:
            raise SigningKeyError(f"{path}: no *.pem signing key in the directory")
        return files
    if path.is_file():
        return [path]
    raise SigningKeyError(f"{path}: no such signing key file or directory")


def generate_signing_key(path: str | Path) -> tuple[str, Ed25519PrivateKey]:
    """Write a new Ed25519 key as PKCS#8 PEM (mode 0600, never over an existing file); return (kid, key)."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)
    return key_id(key.public_key()), key


def _jwk(public_key: Ed25519PublicKey) -> dict[str, str]:
    # The members in lexicographic order (crv, kty, x): as RFC 7638 hashes them, and as the JWKS has always listed them.
    return dict(sorted(OKPAlgorithm.to_jwk(public_key, as_dict=True).items()))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
