"""NVIDIA's GPU evidence: an SPDM 1.1 GET_MEASUREMENTS request and the GPU's signed MEASUREMENTS
response (DMTF DSP0274), read into well-formed fields and checked against the GPU's certificate
chain, as NVIDIA's attestation SDK lays them out.

The report is the request (37 bytes) followed by the response, which ends with an ECDSA P-384
signature (r || s, 96 bytes) by the chain's leaf over every byte before it, the request included,
hashed with SHA-384. The chain is the GPU's PEM certificates, leaf first (the GSP firmware's
certificate), NVIDIA's Device Identity CA last. The response's opaque data carries NVIDIA's
fields: the driver and VBIOS versions the RIMs are named by, and the firmware's FWID, which
must be the one the leaf certificate was issued for.

`read_spdm_evidence` raises core.validation.Invalid, naming where, for evidence off its layout
(the appraisal makes it a `malformed` failure); `verify_spdm_evidence` answers every failure,
under the GPU codes: `gpu_chain` (the chain, or the leaf's FWID, component `<gpu>.fwid`),
`gpu_signature` and `gpu_nonce`.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509 import verification

from attestation.verifier.chains import CHAIN_CACHE_SIZE, chain_verifier, load_certificate, pem_chain
from attestation.verifier.fields import MAX_PEM_CHARS, MAX_SPDM_CHAIN_CERTS, MAX_SPDM_REPORT_BYTES
from attestation.verifier.gpu_reports import verifies_p384
from attestation.verifier.verdict import Failure, shown
from core import validation

# DSP0274 1.1.
SPDM_VERSION_1_1 = 0x11
GET_MEASUREMENTS = 0xE0
MEASUREMENTS = 0x60
SIGNATURE_REQUESTED = 0x01  # GET_MEASUREMENTS Param1, bit 0
DMTF_MEASUREMENT_SPECIFICATION = 0x01
MAX_MEASUREMENT_INDEX = 0xFE  # 0xFF means "every block" in a request; no block has it
NONCE_BYTES = 32
REQUEST_BYTES = 4 + NONCE_BYTES + 1
SIGNATURE_BYTES = 96  # ECDSA P-384, r || s

# NVIDIA's opaque data fields, by DataType. Its verifier refuses any type outside 1..36 and any
# opaque data version above 1 (a layout it does not know).
OPAQUE_FIELD_NAMES = {
    1: "cert_issuer_name",
    2: "cert_authority_key_identifier",
    3: "driver_version",
    4: "gpu_info",
    5: "sku",
    6: "vbios_version",
    7: "manufacturer_id",
    8: "tamper_detection",
    9: "smc",
    10: "vpr",
    11: "nvdec0_status",
    12: "msrscnt",
    13: "cprinfo",
    14: "board_id",
    15: "chip_sku",
    16: "chip_sku_mod",
    17: "project",
    18: "project_sku",
    19: "project_sku_mod",
    20: "fwid",
    21: "protected_pcie_status",
    22: "switch_pdi",
    23: "floorswept_ports",
    24: "position_id",
    25: "lock_switch_status",
    32: "gpu_link_conn",
    33: "sys_enable_status",
    34: "opaque_data_version",
    35: "chip_info",
    36: "feature_flag",
}
OPAQUE_FIELD_TYPES = range(1, 37)
MAX_OPAQUE_DATA_VERSION = 1
DRIVER_VERSION = re.compile(rb"[0-9A-Za-z._-]{1,32}")
VBIOS_VERSION_BYTES = 8

# The leaf certificate's FWID, in a TCG DICE extension. Hopper's (2.23.133.5.4.1) is NVIDIA's own
# SEQUENCE whose last element is the FWID; Blackwell's (2.23.133.5.4.1.1) is a DiceTcbInfo, whose
# fwids list ([6]) holds the firmware's FWID first.
HOPPER_FWID_EXTENSION = x509.ObjectIdentifier("2.23.133.5.4.1")
TCB_INFO_FWID_EXTENSION = x509.ObjectIdentifier("2.23.133.5.4.1.1")
DER_SEQUENCE, DER_OID, DER_OCTET_STRING, DER_TCB_INFO_FWIDS = 0x30, 0x06, 0x04, 0xA6

PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]*-----END CERTIFICATE-----")
REPORT_LAYOUT = "an SPDM 1.1 GET_MEASUREMENTS request and its signed MEASUREMENTS response"


class MeasurementBlock(NamedTuple):  # a tuple: a report has 64, made at a fraction of a dataclass's cost
    dmtf_type: int  # DMTFSpecMeasurementValueType: bit 7 set for a raw bit stream, else a digest
    value: bytes


@dataclass(frozen=True)
class SPDMEvidence:
    """A GPU's SPDM report and certificate chain, each well-formed (not yet checked against anything)."""

    nonce: bytes  # the request's: the verifier's challenge
    slot: int  # the certificate slot the GPU was asked to sign with
    requested_index: int  # the measurement block asked for; 0xFF for all of them
    measurements: Mapping[int, MeasurementBlock]  # by index
    opaque: Mapping[str, bytes]  # NVIDIA's opaque data fields, by name (OPAQUE_FIELD_NAMES)
    driver_version: str  # "550.90.07"
    vbios_version: str  # "96.00.9F.00.01", as NVIDIA's VBIOS RIMs are named
    signature: bytes
    signed: bytes  # what the leaf's key signed: the report up to the signature
    chain: tuple[x509.Certificate, ...]  # leaf first


def read_spdm_evidence(report: bytes, chain_pem: object, where: str = "gpu") -> SPDMEvidence:
    """Raises validation.Invalid, naming `where`.report or `where`.cert_chain, for evidence off its layout."""
    chain = _read_chain(chain_pem, f"{where}.cert_chain")
    if not 0 < len(report) <= MAX_SPDM_REPORT_BYTES:
        raise validation.Invalid(
            f"{where}.report",
            f"must be {REPORT_LAYOUT}, of at most {MAX_SPDM_REPORT_BYTES} bytes",
            f"{len(report)} bytes",
        )
    try:
        return _parse_report(report, chain)
    except ValueError as err:
        raise validation.Invalid(f"{where}.report", f"must be {REPORT_LAYOUT}", str(err)) from None


def verify_spdm_evidence(
    evidence: SPDMEvidence, *, nonce: bytes, root: x509.Certificate, at: datetime, component: str = "gpu"
) -> list[Failure]:
    """Every failure of the evidence: its chain to `root` (valid at `at`), signature, nonce and FWID."""
    if at.tzinfo is None:
        raise ValueError("at must be timezone-aware")
    failures: list[Failure] = []

    def fail(code: str, where: str, expected: str, found: str) -> None:
        failures.append(Failure(code, where, expected, shown(found)))

    problem = _chain_problem(evidence.chain, root, at)
    if problem is not None:
        fail("gpu_chain", component, f"a chain to {root.subject.rfc4514_string()} valid at {at.isoformat()}", problem)
    leaf = evidence.chain[0]
    half = SIGNATURE_BYTES // 2
    signature = encode_dss_signature(
        int.from_bytes(evidence.signature[:half], "big"), int.from_bytes(evidence.signature[half:], "big")
    )
    if not verifies_p384(leaf.public_key(), signature, evidence.signed):
        fail("gpu_signature", component, "a valid ECDSA P-384 signature by the leaf certificate's key", "invalid")
    if evidence.nonce != nonce:
        fail("gpu_nonce", component, nonce.hex(), evidence.nonce.hex())
    # Firmware that reports no FWID (the Hopper sample of driver 535.86.09) has nothing to compare, as NVIDIA's
    # verifier has it; the signature still binds the report to the leaf.
    fwid = evidence.opaque.get("fwid")
    if fwid is not None:
        expected = f"the report's FWID, {fwid.hex()}, in the leaf certificate"
        try:
            certified = _certified_fwid(leaf)
        except ValueError as err:
            fail("gpu_chain", f"{component}.fwid", expected, str(err))
        else:
            if certified != fwid:
                fail("gpu_chain", f"{component}.fwid", expected, f"{certified.hex()} in the leaf certificate")
    return failures


class _Reader:
    """Little-endian reader of SPDM messages, each field named for the error that says where it ends."""

    def __init__(self, data: bytes):
        self.data, self.offset = data, 0

    def take(self, size: int, field: str) -> bytes:
        chunk = self.data[self.offset : self.offset + size]
        if len(chunk) != size:
            raise ValueError(f"ends at byte {len(self.data)}, inside {field}")
        self.offset += size
        return chunk

    def uint(self, size: int, field: str) -> int:
        return int.from_bytes(self.take(size, field), "little")

    def end(self, what: str) -> None:
        if self.offset != len(self.data):
            raise ValueError(f"{len(self.data) - self.offset} bytes after {what}")


def _parse_report(report: bytes, chain: tuple[x509.Certificate, ...]) -> SPDMEvidence:
    reader = _Reader(report)
    _expect_header(reader, GET_MEASUREMENTS, "request")
    attributes, requested_index = reader.uint(1, "the request's Param1"), reader.uint(1, "the request's Param2")
    if not attributes & SIGNATURE_REQUESTED:
        raise ValueError("a request for unsigned measurements")
    nonce = reader.take(NONCE_BYTES, "the request's Nonce")
    slot = reader.uint(1, "SlotIDParam") & 0x0F
    _expect_header(reader, MEASUREMENTS, "response")
    reader.take(2, "the response's Param1 and Param2")
    block_count = reader.uint(1, "NumberOfBlocks")
    record = reader.take(reader.uint(3, "MeasurementRecordLength"), "MeasurementRecord")
    measurements = _measurement_blocks(_Reader(record), block_count)
    reader.take(NONCE_BYTES, "the response's Nonce")  # the GPU's own, not the challenge
    opaque = _opaque_fields(reader.take(reader.uint(2, "OpaqueLength"), "OpaqueData"))
    signed = report[: reader.offset]
    signature = reader.take(SIGNATURE_BYTES, "Signature (ECDSA P-384, 96 bytes)")
    reader.end("the signature")
    return SPDMEvidence(
        nonce=nonce,
        slot=slot,
        requested_index=requested_index,
        measurements=measurements,
        opaque=opaque,
        driver_version=_driver_version(opaque),
        vbios_version=_vbios_version(opaque),
        signature=signature,
        signed=signed,
        chain=chain,
    )


def _expect_header(reader: _Reader, code: int, message: str) -> None:
    version, found = reader.uint(1, f"the {message}'s SPDMVersion"), reader.uint(1, f"the {message}'s code")
    if (version, found) != (SPDM_VERSION_1_1, code):
        raise ValueError(
            f"a {message} of SPDM version {version:#x}, code {found:#x}"
            f" (expected version {SPDM_VERSION_1_1:#x}, code {code:#x})"
        )


# A measurement block's header (Index, MeasurementSpecification, MeasurementSize) and its DMTF
# value's (DMTFSpecMeasurementValueType, DMTFSpecMeasurementValueSize): read with one unpack, as a
# report has 64 blocks and reading them is most of the verification's time besides the signature.
_BLOCK_HEADER = struct.Struct("<BBH")
_VALUE_HEADER_BYTES = 3
_HEADERS = struct.Struct("<BBHBH")


def _measurement_blocks(record: _Reader, count: int) -> dict[int, MeasurementBlock]:
    if count == 0:
        raise ValueError("no measurement blocks")
    data, offset, end = record.data, record.offset, len(record.data)
    blocks: dict[int, MeasurementBlock] = {}
    for _ in range(count):  # at most 255: NumberOfBlocks is a byte
        if offset + _BLOCK_HEADER.size > end:
            raise ValueError(f"ends at byte {end}, inside a measurement block's header")
        if offset + _HEADERS.size > end:  # a header, and too little for a value's header
            index, _, size = _BLOCK_HEADER.unpack_from(data, offset)
            raise ValueError(f"ends at byte {end}, inside block {index}")
        index, specification, size, value_type, value_size = _HEADERS.unpack_from(data, offset)
        start, offset = offset + _BLOCK_HEADER.size, offset + _BLOCK_HEADER.size + size
        if offset > end:
            raise ValueError(f"ends at byte {end}, inside block {index}")
        if not 1 <= index <= MAX_MEASUREMENT_INDEX or index in blocks:
            raise ValueError(f"a measurement block of index {index} (0, 255 or repeated)")
        if specification != DMTF_MEASUREMENT_SPECIFICATION:
            raise ValueError(f"measurement block {index} of specification {specification:#x}, not DMTF's")
        if size < _VALUE_HEADER_BYTES:
            raise ValueError(f"ends at byte {size}, inside block {index}'s DMTF value header")
        if value_size != size - _VALUE_HEADER_BYTES:
            raise ValueError(f"measurement block {index}'s value of {value_size} bytes in {size - _VALUE_HEADER_BYTES}")
        blocks[index] = MeasurementBlock(value_type, data[start + _VALUE_HEADER_BYTES : offset])
    record.offset = offset
    record.end(f"the {count} measurement blocks NumberOfBlocks announces")
    return blocks


def _opaque_fields(data: bytes) -> dict[str, bytes]:
    reader, fields = _Reader(data), {}
    while reader.offset < len(data):  # every field takes 4 bytes at least
        kind = reader.uint(2, "an opaque field's DataType")
        value = reader.take(reader.uint(2, f"opaque field {kind}'s DataSize"), f"opaque field {kind}")
        if kind not in OPAQUE_FIELD_TYPES:
            raise ValueError(f"an opaque field of unknown type {kind}")
        name = OPAQUE_FIELD_NAMES.get(kind, f"field_{kind}")
        if name in fields:
            raise ValueError(f"opaque field {name} twice")
        fields[name] = value
    if not fields:
        raise ValueError("no opaque data")
    version = int.from_bytes(fields.get("opaque_data_version", b""), "little")
    if version > MAX_OPAQUE_DATA_VERSION:
        raise ValueError(f"opaque data of version {version}; versions up to {MAX_OPAQUE_DATA_VERSION} are known")
    return fields


def _driver_version(opaque: Mapping[str, bytes]) -> str:
    raw = opaque.get("driver_version")
    if raw is None:
        raise ValueError("no driver version in the opaque data")
    version = raw.rstrip(b"\0")  # NUL-terminated
    if not DRIVER_VERSION.fullmatch(version):
        raise ValueError(f"a driver version of {raw[:40]!r}")
    return version.decode()


def _vbios_version(opaque: Mapping[str, bytes]) -> str:
    raw = opaque.get("vbios_version")
    if raw is None or len(raw) != VBIOS_VERSION_BYTES:
        raise ValueError(f"no VBIOS version of {VBIOS_VERSION_BYTES} bytes in the opaque data")
    # As NVIDIA's tools show it and name its VBIOS RIMs: bytes 3 to 0, then byte 4.
    return ".".join(f"{byte:02X}" for byte in (*raw[3::-1], raw[4]))


def _read_chain(chain_pem: object, where: str) -> tuple[x509.Certificate, ...]:
    text = validation.text(
        chain_pem,
        where,
        max_length=MAX_SPDM_CHAIN_CERTS * MAX_PEM_CHARS,
        expected=f"the PEM certificates of a chain, at most {MAX_SPDM_CHAIN_CERTS}",
    )
    pems: list[object] = list(PEM_CERTIFICATE.findall(text))
    other_text = PEM_CERTIFICATE.sub("", text).strip()
    if not 1 <= len(pems) <= MAX_SPDM_CHAIN_CERTS or other_text:
        raise validation.Invalid(
            where,
            f"must be 1 to {MAX_SPDM_CHAIN_CERTS} PEM certificates, leaf first, and nothing else",
            f"{len(pems)} certificates" + (" and other text" if other_text else ""),
        )
    return tuple(load_certificate(pem) for pem in pem_chain(pems, [f"{where}[{i}]" for i in range(len(pems))]))


def _chain_problem(chain: tuple[x509.Certificate, ...], root: x509.Certificate, at: datetime) -> str | None:
    not_valid = [c for c in (*chain, root) if not c.not_valid_before_utc <= at <= c.not_valid_after_utc]
    if not_valid:
        return f"a certificate not valid at {at.isoformat()}: {not_valid[0].subject.rfc4514_string()}"
    return _path_problem(chain, root)


@functools.lru_cache(maxsize=CHAIN_CACHE_SIZE)
def _path_problem(chain: tuple[x509.Certificate, ...], root: x509.Certificate) -> str | None:
    """The chain's path to the root and its leaf's use, which do not depend on the time once every
    certificate is valid (checked apart, each time): checked at the latest notBefore (NVIDIA's leaf
    predates its intermediate), and cached, as every report of a GPU comes with the same chain."""
    leaf = chain[0]
    latest_start = max(c.not_valid_before_utc for c in (*chain, root))
    try:
        chain_verifier(root, latest_start).verify(leaf, list(chain[1:]))
    except (verification.VerificationError, ValueError) as err:  # the validator's words alone seldom say which root
        return f"a chain ending at {chain[-1].issuer.rfc4514_string()}: {err}"
    try:
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound as err:
        return f"a leaf without {err.oid.dotted_string}"
    try:
        is_ca = leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False  # NVIDIA's GSP leaf certificates have no basicConstraints: an end entity
    if is_ca or not usage.digital_signature:
        return "a leaf that is a CA or may not sign"
    return None


def _certified_fwid(leaf: x509.Certificate) -> bytes:
    """The FWID the leaf certificate was issued for; ValueError saying why there is none."""
    for oid in (HOPPER_FWID_EXTENSION, TCB_INFO_FWID_EXTENSION):
        try:
            extension = leaf.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        # cryptography knows neither OID, so it keeps the extension's DER as it is.
        outer = _der_elements(extension.value if isinstance(extension, x509.UnrecognizedExtension) else b"")
        if len(outer) != 1 or outer[0][0] != DER_SEQUENCE:
            raise ValueError(f"an FWID extension ({oid.dotted_string}) that is not one SEQUENCE")
        elements = _der_elements(outer[0][1])
        if oid == HOPPER_FWID_EXTENSION:
            return _fwid_digest(elements[-1:], oid)
        fwids = [value for tag, value in elements if tag == DER_TCB_INFO_FWIDS]
        return _fwid_digest(_der_elements(fwids[0])[:1] if fwids else [], oid)
    raise ValueError(
        f"a leaf certificate without an FWID extension ({HOPPER_FWID_EXTENSION.dotted_string}"
        f" or {TCB_INFO_FWID_EXTENSION.dotted_string})"
    )


def _fwid_digest(elements: list[tuple[int, bytes]], oid: x509.ObjectIdentifier) -> bytes:
    """The digest of an FWID, SEQUENCE { hashAlg OBJECT IDENTIFIER, digest OCTET STRING }."""
    fwid = _der_elements(elements[0][1]) if elements and elements[0][0] == DER_SEQUENCE else []
    if [tag for tag, _ in fwid] != [DER_OID, DER_OCTET_STRING]:
        raise ValueError(f"an FWID extension ({oid.dotted_string}) without an FWID where it belongs")
    return fwid[1][1]


def _der_elements(data: bytes) -> list[tuple[int, bytes]]:
    """The DER elements, (tag, contents), that fill `data` one after another; ValueError if they do not."""
    elements, offset = [], 0
    while offset < len(data):  # every element takes 2 bytes at least
        header = data[offset : offset + 2]
        if len(header) != 2 or header[0] & 0x1F == 0x1F:
            raise ValueError("an FWID extension that is not DER (a cut header or a multi-byte tag)")
        tag, length, offset = header[0], header[1], offset + 2
        if length & 0x80:  # the long form: the next (length & 0x7F) bytes hold it
            size = length & 0x7F
            if not 1 <= size <= 2 or offset + size > len(data):
                raise ValueError("an FWID extension that is not DER (an indefinite or oversized length)")
            length, offset = int.from_bytes(data[offset : offset + size], "big"), offset + size
        if offset + length > len(data):
            raise ValueError("an FWID extension that is not DER (an element longer than its container)")
        elements.append((tag, data[offset : offset + length]))
        offset += length
    return elements
