"""A GPU's SPDM responder as its BMC reaches it: signed measurements in NVIDIA's layout.

`signed_measurements` answers Redfish's ComponentIntegrity.SPDMGetSignedMeasurements with what
NVIDIA's HGX BMCs return for a GPU: an SPDM 1.1 GET_MEASUREMENTS request (37 bytes) followed by
the GPU's MEASUREMENTS response, which ends with an ECDSA P-384 signature (r || s, 96 bytes) by
its leaf's key over every byte before it, hashed with SHA-384 (attestation.verifier.spdm reads it).

The GPU has 64 SHA-384 measurement blocks (indices 1..64), a pure function of its releases as a
RIM's golden values are: the blocks of VBIOS_INDICES of its VBIOS image (the digest
FirmwareInventory shows, so a firmware_tamper changes them), the others of its driver. The opaque
data carries the driver and VBIOS versions and the FWID of its firmware, the one its leaf was
issued for. Faults: gpu_measurement_tamper changes block TAMPERED_INDEX (still signed),
gpu_wrong_nonce answers with another nonce, gpu_broken_chain serves a forged leaf.
"""

from __future__ import annotations

import hashlib
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from core.topology import GPU_MODEL

from . import releases
from .pki import PKI
from .state import NodeState

SPDM_VERSION_1_1 = 0x11
GET_MEASUREMENTS, MEASUREMENTS = 0xE0, 0x60
SIGNATURE_REQUESTED = 0x01
ALL_MEASUREMENTS = 0xFF
NONCE_BYTES = 32
BLOCKS = range(1, 65)
# Blocks NVIDIA's Hopper VBIOS RIM measures (its RIM indices 0-6 and 8-12, a block's index less
# one); the others are the driver's.
VBIOS_INDICES = frozenset((*range(1, 8), *range(9, 14)))
TAMPERED_INDEX = 10  # the block NVIDIA's own "measurement mismatch" VBIOS RIM differs at
DMTF_MEASUREMENT_SPECIFICATION = 0x01
DIGEST_TYPE = 0x01  # DMTFSpecMeasurementValueType: a digest of mutable firmware
# NVIDIA's opaque data fields (DataType): driver_version, vbios_version, fwid, opaque_data_version.
DRIVER_VERSION, VBIOS_VERSION, FWID, OPAQUE_DATA_VERSION = 3, 6, 20, 34

TAMPER, WRONG_NONCE, BROKEN_CHAIN = "gpu_measurement_tamper", "gpu_wrong_nonce", "gpu_broken_chain"
KINDS = (TAMPER, WRONG_NONCE, BROKEN_CHAIN)


def _sha384(*parts: str) -> bytes:
    return hashlib.sha384("/".join(("bmcsim/spdm", GPU_MODEL, *parts)).encode()).digest()


def fwid(vbios_release: str) -> bytes:
    """The FWID of the GSP firmware a VBIOS release carries: what the GPU's leaf is issued for."""
    return _sha384("fwid", vbios_release)


def vbios_measurement(index: int, vbios_digest: str) -> bytes:
    """Block `index` (of VBIOS_INDICES) of the VBIOS image with that digest: its RIM's golden value."""
    return _sha384("vbios", vbios_digest, str(index))


def driver_measurement(index: int, driver_release: str) -> bytes:
    """Block `index` (not of VBIOS_INDICES) of a driver release: its RIM's golden value."""
    return _sha384("driver", driver_release, str(index))


def measurement(index: int, vbios_digest: str, driver_release: str) -> bytes:
    return (
        vbios_measurement(index, vbios_digest) if index in VBIOS_INDICES else driver_measurement(index, driver_release)
    )


def vbios_version_bytes(release: str) -> bytes:
    """NVIDIA's 8 bytes for "96.00.99.00.01": the first four parts are bytes 3 to 0, the fifth byte 4."""
    parts = [int(part, 16) for part in release.split(".")]
    return bytes([*parts[3::-1], parts[4], 0, 0, 0])


def _fault(node: NodeState, kind: str, gpu: int) -> bool:
    return any(f["kind"] == kind and f["gpu"] == gpu for f in node.faults)


def identity(node: NodeState, gpu: int, pki: PKI) -> tuple[ec.EllipticCurvePrivateKey, list[str]]:
    """The GPU's SPDM key and the chain its Certificate serves (leaf, provisioner CA), forged under gpu_broken_chain."""
    spec = node.spec.gpus[gpu]
    return pki.spdm_identity(
        spec.uuid, spec.serial, fwid(node.installed(f"GPU{gpu}")), forged=_fault(node, BROKEN_CHAIN, gpu)
    )


def signed_measurements(node: NodeState, gpu: int, pki: PKI, nonce: bytes, slot: int, index: int, now: float) -> bytes:
    """The GET_MEASUREMENTS request for `index` (1..64, or ALL_MEASUREMENTS) with `nonce`, and its signed answer."""
    key, _ = identity(node, gpu, pki)
    request = bytes([SPDM_VERSION_1_1, GET_MEASUREMENTS, SIGNATURE_REQUESTED, index]) + nonce + bytes([slot])
    if _fault(node, WRONG_NONCE, gpu):  # a replayed answer: the request it signs carried another nonce
        request = request[:4] + hashlib.sha256(b"bmcsim/stale/" + nonce).digest() + request[-1:]
    vbios_release = node.installed(f"GPU{gpu}")
    vbios_digest = node.firmware_shown(f"GPU{gpu}", now)[1]
    driver_release = releases.GPU_RELEASES["driver"][-1]  # the factory driver, as the in-band report measures
    record = b""
    for block in BLOCKS if index == ALL_MEASUREMENTS else (index,):
        value = measurement(block, vbios_digest, driver_release)
        if block == TAMPERED_INDEX and _fault(node, TAMPER, gpu):
            value = _sha384("tampered", node.spec.gpus[gpu].uuid)
        dmtf = bytes([DIGEST_TYPE]) + len(value).to_bytes(2, "little") + value
        record += bytes([block, DMTF_MEASUREMENT_SPECIFICATION]) + len(dmtf).to_bytes(2, "little") + dmtf
    opaque = b"".join(
        kind.to_bytes(2, "little") + len(value).to_bytes(2, "little") + value
        for kind, value in (
            (DRIVER_VERSION, driver_release.encode() + b"\0"),
            (VBIOS_VERSION, vbios_version_bytes(vbios_release)),
            (FWID, fwid(vbios_release)),
            (OPAQUE_DATA_VERSION, (1).to_bytes(2, "little")),
        )
    )
    blocks = len(BLOCKS) if index == ALL_MEASUREMENTS else 1
    response = (
        bytes([SPDM_VERSION_1_1, MEASUREMENTS, 0, slot, blocks])
        + len(record).to_bytes(3, "little")
        + record
        + os.urandom(NONCE_BYTES)  # the responder's own nonce
        + len(opaque).to_bytes(2, "little")
        + opaque
    )
    signed = request + response
    r, s = decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA384())))
    return signed + r.to_bytes(48, "big") + s.to_bytes(48, "big")
