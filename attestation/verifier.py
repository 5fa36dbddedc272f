"""Evidence -> verdict: the fail-closed attestation verifier (pure: no Django, no clock, no I/O).

The evidence is the in-band agent's answer (bmcsim/evidence.py documents it): a TPM 2.0 quote
signed by the node's attestation key (AK), the measured-boot event log, and one signed report
per GPU. `verify` checks every part and reports every failure, never only the first; a verdict
affirms only when there is no failure at all. The caller makes the nonce with `new_nonce(now)`:
it carries its issue time, which is how `verify` knows the evidence's age. Anything that cannot
be parsed is a `malformed` failure: no evidence makes `verify` raise, and nothing malformed ever
affirms.

Failure codes, one per check (stable: stored, signed into results, shown to operators):

- `malformed`: a part of the evidence is missing, of the wrong type, badly encoded or too big.
- `stale`: the nonce (from `new_nonce`) was issued longer ago than the policy allows, or
  carries no issue time at all.
- `ak_chain`: the AK certificate does not chain to the manufacturer CA, is not valid now, or is
  not a signing end-entity certificate.
- `ak_identity`: the AK certificate names another node (CN = name, serialNumber = serial).
- `quote_format`: the quote is not a TPMS_ATTEST of type TPM_ST_ATTEST_QUOTE with the TPM's
  magic, exactly as long as its fields.
- `quote_signature`: the AK's signature over the quote does not verify.
- `nonce_mismatch`: the quote's extraData is not the nonce.
- `pcr_selection`: the quote does not cover exactly the policy's PCRs of the SHA-256 bank.
- `unexpected_event`: an event names a component the policy does not measure, or sits in a PCR
  other than the one the policy assigns to that component.
- `missing_component`: a boot component the policy requires was not measured.
- `pcr_digest`: replaying the event log (`PCR = SHA256(PCR || digest)`) does not give the
  quote's PCR digest.
- `unknown_component_digest`: a measured boot component's digest is not in the reference values.
- `secure_boot_off`: the policy requires Secure Boot (`boot.secure_boot_required`) and PCR 7's
  events lack the SecureBoot variable measured enabled (found: "Disabled", or "not measured").
- `gpu_chain`: a GPU's certificate chain does not end at the GPU-vendor root, or is not valid now.
- `gpu_identity`: a GPU's device certificate names another GPU than the one enrolled at its index.
- `gpu_signature`: a GPU report's signature does not verify.
- `gpu_nonce`: a GPU report does not carry the nonce.
- `gpu_measurement`: a GPU measurement is missing, unexpected, or not in the reference values.
- `release_retired`: a boot component or GPU measurement is a release operators retired.
- `release_not_pinned`: it is a known release, but not one of those the node's class is pinned to
  (its firmware baseline's boot releases).
- `cc_mode`: a GPU reports another confidential-computing mode than the policy demands.
- `gpu_inventory`: the reported GPUs are not exactly the node's enrolled GPUs.
- `verifier_error`: the verifier itself failed (a bug); the verdict fails closed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from core import validation

from .policy import SECURE_BOOT_PCR, Policy
from .reference import GPU_PREFIX, ReferenceValues

FAILURE_CODES = (
    "malformed",
    "stale",
    "ak_chain",
    "ak_identity",
    "quote_format",
    "quote_signature",
    "nonce_mismatch",
    "pcr_selection",
    "unexpected_event",
    "missing_component",
    "pcr_digest",
    "unknown_component_digest",
    "secure_boot_off",
    "gpu_chain",
    "gpu_identity",
    "gpu_signature",
    "gpu_nonce",
    "gpu_measurement",
    "release_retired",
    "release_not_pinned",
    "cc_mode",
    "gpu_inventory",
    "verifier_error",
)

# TPM 2.0 Library, Part 2.
TPM_GENERATED_VALUE = 0xFF544347
TPM_ST_ATTEST_QUOTE = 0x8018
TPM_ALG_SHA256 = 0x000B
TPM_ALG_RSASSA = 0x0014
TPM_ALG_ECDSA = 0x0018
PCR_COUNT = 24
ZERO_PCR = bytes(32)

# Bounds on what an agent may send; anything bigger is malformed, not merely slow.
MAX_ATTEST_BYTES = 1024
MAX_SIGNATURE_BYTES = 1024
MAX_PEM_CHARS = 8192
MAX_CHAIN_CERTS = 4
MAX_EVENTS = 1024
MAX_GPUS = 64
MAX_MEASUREMENTS = 16
MAX_NAME_CHARS = 64
MAX_SHOWN_CHARS = 160  # of a found value, in a failure
PCR_INDEX = f"a PCR index from 0 to {PCR_COUNT - 1}"
GPU_INDEX = f"a GPU index from 0 to {MAX_GPUS - 1}"

# A nonce from `new_nonce`: its issue time in milliseconds since the epoch, then random bytes.
NONCE_TIME_BYTES = 8
NONCE_RANDOM_BYTES = 24
NONCE_BYTES = NONCE_TIME_BYTES + NONCE_RANDOM_BYTES
CLOCK_SKEW = timedelta(seconds=5)

# UEFI Secure Boot's state as firmware measures it into PCR 7 (TCG PC Client Platform Firmware
# Profile): an EV_EFI_VARIABLE_DRIVER_CONFIG event whose digest is SHA-256 of the SecureBoot
# variable's UEFI_VARIABLE_DATA, that is the EFI global-variable GUID, the lengths of the name (in
# characters) and of the data, the name in UCS-2, then the value: 01 enabled, 00 disabled.
SECURE_BOOT_COMPONENT = "secureboot"
_SECURE_BOOT_VARIABLE = (
    uuid.UUID("8be4df61-93ca-11d2-aa0d-00e098032b8c").bytes_le
    + struct.pack("<QQ", len("SecureBoot"), 1)
    + "SecureBoot".encode("utf-16-le")
)
SECURE_BOOT_MEASURED = {
    hashlib.sha256(_SECURE_BOOT_VARIABLE + b"\x01").digest(): "Enabled",
    hashlib.sha256(_SECURE_BOOT_VARIABLE + b"\x00").digest(): "Disabled",
}

CHAIN_CACHE_SIZE = 16_384

# The issuer keys cryptography's path validator (its WebPKI profile) verifies signatures of.
ISSUER_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
MIN_ISSUER_RSA_BITS = 2048


@dataclass(frozen=True)
class Failure:
    code: str
    component: str
    expected: str
    found: str


@dataclass(frozen=True)
class Verdict:
    affirming: bool
    failures: tuple[Failure, ...]
    measurements: Mapping[str, str]  # what was measured, component -> hex digest, for display


@dataclass(frozen=True)
class GPUIdentity:
    index: int
    uuid: str
    serial: str


@dataclass(frozen=True)
class NodeIdentity:
    name: str
    serial: str
    gpus: tuple[GPUIdentity, ...]


@dataclass(frozen=True)
class TrustedRoots:
    manufacturer_ca: x509.Certificate
    gpu_vendor_root: x509.Certificate

    @classmethod
    def from_pem(
        cls, *, manufacturer_ca: object, gpu_vendor_root: object, valid_at: datetime | None = None
    ) -> TrustedRoots:
        """From the PEM texts GET /bmcsim/v1/roots serves; UnusableAnchor naming each one no chain can end at."""
        roots, problems = {}, []
        for role, pem in (("manufacturer_ca", manufacturer_ca), ("gpu_vendor_root", gpu_vendor_root)):
            try:
                roots[role] = load_trust_anchor(role, pem, valid_at=valid_at)
            except UnusableAnchor as unusable:
                problems.append(str(unusable))
        if problems:
            raise UnusableAnchor("; ".join(problems))
        return cls(**roots)


class UnusableAnchor(ValueError):
    """A trust anchor no chain can end at; the message names its role and why."""


def load_trust_anchor(role: str, pem: object, *, valid_at: datetime | None = None) -> x509.Certificate:
    """The root certificate for `role`, if the chain checks can use it; UnusableAnchor otherwise.

    Usable means: exactly one PEM certificate, of a CA (basicConstraints cA), with a key the path
    validator takes from an issuer (ECDSA P-256, P-384 or P-521, or RSA of 2048 bits or more), and
    nothing else the path validator refuses in an issuer (a non-critical basicConstraints, no
    keyCertSign, an extendedKeyUsage without clientAuth, an unknown critical extension...).
    With `valid_at`, it must also be valid then.
    """
    try:
        return _trust_anchor(pem, valid_at)
    except ValueError as err:
        raise UnusableAnchor(f"trust anchor {role} is unusable: {err}") from None


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


def new_nonce(now: datetime) -> bytes:
    """A fresh nonce that carries its issue time, so `verify` can tell how old the evidence is."""
    millis = int(now.timestamp() * 1000)
    return millis.to_bytes(NONCE_TIME_BYTES, "big") + os.urandom(NONCE_RANDOM_BYTES)


def nonce_issued_at(nonce: bytes) -> datetime | None:
    if len(nonce) != NONCE_BYTES:
        return None
    millis = int.from_bytes(nonce[:NONCE_TIME_BYTES], "big")
    try:
        return datetime.fromtimestamp(millis / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return None


def verify(
    *,
    evidence: object,
    nonce: bytes,
    node: NodeIdentity,
    reference: ReferenceValues,
    policy: Policy,
    roots: TrustedRoots,
    now: datetime,
) -> Verdict:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    appraisal = _Appraisal(nonce=nonce, node=node, reference=reference, policy=policy, roots=roots, now=now)
    try:
        appraisal.run(evidence)
    except Exception as err:  # a bug here must refuse the node, never pass it or crash the workflow
        appraisal.fail("verifier_error", "verifier", "no internal error", f"{type(err).__name__}: {err}")
    failures = tuple(appraisal.failures)
    return Verdict(affirming=not failures, failures=failures, measurements=appraisal.measurements)


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


@dataclass
class _Appraisal:
    nonce: bytes
    node: NodeIdentity
    reference: ReferenceValues
    policy: Policy
    roots: TrustedRoots
    now: datetime
    failures: list[Failure] = field(default_factory=list)
    measurements: dict[str, str] = field(default_factory=dict)

    def fail(self, code: str, component: str, expected: str, found: str) -> None:
        self.failures.append(Failure(code, component, expected, _shown(found)))

    def fail_unaccepted(self, code: str, where: str, entry_component: str, expected: str, digest: str) -> None:
        """A digest not accepted: a known release refused for this node (retired, or not one its
        class is pinned to) fails as such, naming the release; any other digest fails as `code`."""
        refusal = self.reference.refused.get(entry_component, {}).get(digest)
        if refusal is None:
            self.fail(code, where, expected, digest)
        elif refusal.retired:
            self.fail("release_retired", where, "a release not retired", f"{refusal.release} (retired)")
        else:
            self.fail("release_not_pinned", where, "a release this node class is pinned to", refusal.release)

    def run(self, evidence: object) -> None:
        self.check_freshness()
        evidence = self.guarded(
            validation.mapping, evidence, "evidence", expected="an object with quote, event_log and gpus"
        )
        if evidence is None:
            return
        events = self.guarded(self.parse_event_log, evidence.get("event_log"))
        replayed = self.check_events(events) if events is not None else None
        if events is not None and self.policy.secure_boot_required:
            self.check_secure_boot(events)
        self.guarded(self.check_quote, evidence.get("quote"), replayed)
        self.guarded(self.check_gpus, evidence.get("gpus"))

    def guarded(self, check, *args, **kwargs):
        """Run a check; evidence off its shape (core.validation.Invalid) is a `malformed` failure."""
        try:
            return check(*args, **kwargs)
        except validation.Invalid as invalid:
            expected = invalid.problem.removeprefix("must be ")
            self.failures.append(Failure("malformed", invalid.path, expected, _describe(invalid.found)))
            return None

    def check_freshness(self) -> None:
        issued = nonce_issued_at(self.nonce)
        limit = timedelta(seconds=self.policy.max_evidence_age_seconds)
        expected = f"a nonce issued within {self.policy.max_evidence_age_seconds} s before {self.now.isoformat()}"
        if issued is None:
            self.fail("stale", "nonce", expected, "a nonce that carries no issue time (not from new_nonce)")
        elif not self.now - limit <= issued <= self.now + CLOCK_SKEW:
            self.fail("stale", "nonce", expected, f"issued at {issued.isoformat()}")

    # The TPM quote.

    def check_quote(self, document: object, replayed: dict[int, bytes] | None) -> None:
        quote_doc = validation.mapping(document, "quote", expected="an object with attest, signature and ak_cert")
        attest = _base64(quote_doc.get("attest"), "quote.attest", MAX_ATTEST_BYTES)
        signature = _base64(quote_doc.get("signature"), "quote.signature", MAX_SIGNATURE_BYTES)
        chain = self.guarded(_pem_chain, [quote_doc.get("ak_cert")], ["quote.ak_cert"])
        ak = None
        if chain is not None:
            leaf = self.check_chain(chain, self.roots.manufacturer_ca, "ak_chain", "quote.ak_cert")
            ak = leaf.public_key
            self.check_subject(leaf.certificate, self.node.name, self.node.serial, "ak_identity", "quote.ak_cert")
        self.failures.extend(verify_quote(attest, signature, ak, self.nonce, pcrs=replayed)[1])

    def check_chain(self, pems: tuple[str, ...], root: x509.Certificate, code: str, component: str) -> _Leaf:
        leaf, problem = _verified_chain(pems, root)
        if problem is None:
            certificates = (*leaf.chain, root)
            expired = [c for c in certificates if not c.not_valid_before_utc <= self.now <= c.not_valid_after_utc]
            if expired:
                problem = f"a certificate not valid at {self.now.isoformat()}: {expired[0].subject.rfc4514_string()}"
        if problem is not None:
            self.fail(code, component, f"a chain to {root.subject.rfc4514_string()} valid now", problem)
        return leaf

    def check_subject(self, certificate: x509.Certificate, name: str, serial: str, code: str, component: str) -> None:
        subject = certificate.subject
        found = (_attribute(subject, NameOID.COMMON_NAME), _attribute(subject, NameOID.SERIAL_NUMBER))
        if found != (name, serial):
            self.fail(code, component, f"CN={name}, serialNumber={serial}", f"CN={found[0]}, serialNumber={found[1]}")

    # The measured-boot event log.

    def parse_event_log(self, document: object) -> list[tuple[int, bytes, str]]:
        events = []
        for position, event in enumerate(validation.sequence(document, "event_log", max_items=MAX_EVENTS)):
            where = f"event_log[{position}]"
            event = validation.mapping(event, where, expected="an object with pcr, digest and component")
            pcr = validation.integer(
                event.get("pcr"), f"{where}.pcr", minimum=0, maximum=PCR_COUNT - 1, expected=PCR_INDEX
            )
            digest = _hex(event.get("digest"), f"{where}.digest", 32)
            component = _name(event.get("component"), f"{where}.component")
            events.append((pcr, digest, component))
        return events

    def check_events(self, events: list[tuple[int, bytes, str]]) -> dict[int, bytes]:
        """Check each event against the policy and reference values; return the replayed PCRs."""
        pcrs = {pcr: ZERO_PCR for pcr in self.policy.quoted_pcrs}
        for position, (pcr, digest, component) in enumerate(events):
            where = f"event_log[{position}]"
            expected_pcr = self.policy.boot_pcrs.get(component)
            if expected_pcr is None:
                self.fail("unexpected_event", where, "a component the policy measures", component)
            elif pcr != expected_pcr:
                self.fail("unexpected_event", where, f"{component} in PCR {expected_pcr}", f"{component} in PCR {pcr}")
            if pcr in pcrs:
                pcrs[pcr] = hashlib.sha256(pcrs[pcr] + digest).digest()
            if expected_pcr is None:
                continue
            hex_digest = digest.hex()
            label = component if component not in self.measurements else f"{component}[{position}]"
            self.measurements[label] = hex_digest
            if hex_digest not in self.reference.components.get(component, ()):
                self.fail_unaccepted(
                    "unknown_component_digest", component, component, f"a reference digest of {component}", hex_digest
                )
        measured = {component for _, _, component in events}
        for component in self.policy.boot_pcrs:
            if component not in measured:
                self.fail("missing_component", component, f"a measurement of {component}", "none in the event log")
        return pcrs

    def check_secure_boot(self, events: list[tuple[int, bytes, str]]) -> None:
        """The policy requires Secure Boot: PCR 7 holds the SecureBoot variable measured enabled, and
        never disabled. Read by digest, whatever the agent names the event; the quote of PCR 7 (which
        the policy requires) vouches for the events."""
        measured = {SECURE_BOOT_MEASURED.get(digest) for pcr, digest, _ in events if pcr == SECURE_BOOT_PCR}
        if "Disabled" in measured:
            self.fail("secure_boot_off", SECURE_BOOT_COMPONENT, "Enabled", "Disabled")
        elif "Enabled" not in measured:
            self.fail("secure_boot_off", SECURE_BOOT_COMPONENT, "Enabled", "not measured")

    # The GPU reports.

    def check_gpus(self, document: object) -> None:
        document = validation.sequence(document, "gpus", max_items=MAX_GPUS, expected="a list of GPU reports")
        enrolled = {gpu.index: gpu for gpu in self.node.gpus}
        reported: set[int] = set()
        for position, report in enumerate(document):
            self.guarded(self.check_gpu, report, f"gpus[{position}]", enrolled, reported)
        for index in sorted(enrolled.keys() - reported):
            self.fail("gpu_inventory", f"gpu{index}", f"a report from {enrolled[index].uuid}", "no report")

    def check_gpu(self, report: object, where: str, enrolled: dict[int, GPUIdentity], reported: set[int]) -> None:
        report = validation.mapping(report, where, expected="a GPU report object")
        index = validation.integer(
            report.get("index"), f"{where}.index", minimum=0, maximum=MAX_GPUS - 1, expected=GPU_INDEX
        )
        # A report that names its GPU counts as that GPU's, even if it turns out malformed.
        duplicate = index in reported
        reported.add(index)
        read = _read_gpu_report(report, where)
        # Every field is well-formed from here on: the report is a GPU's, named by its index.
        component = f"gpu{index}"
        enrolled_gpu = enrolled.get(index)
        if enrolled_gpu is None:
            self.fail("gpu_inventory", component, f"an enrolled GPU index ({_indexes(enrolled)})", str(index))
        elif duplicate:
            self.fail("gpu_inventory", component, "one report per GPU", "a second report")
        elif read.uuid != enrolled_gpu.uuid:
            self.fail("gpu_inventory", component, enrolled_gpu.uuid, read.uuid)

        leaf = self.check_chain(read.chain, self.roots.gpu_vendor_root, "gpu_chain", component)
        if enrolled_gpu is not None:
            self.check_subject(leaf.certificate, enrolled_gpu.uuid, enrolled_gpu.serial, "gpu_identity", component)
        if not _verifies_p384(leaf.public_key, read.signature, read.signed):
            self.fail("gpu_signature", component, "a valid ECDSA P-384 signature by the device key", "invalid")
        if read.nonce != self.nonce.hex():
            self.fail("gpu_nonce", component, self.nonce.hex(), read.nonce)
        self.check_gpu_measurements(component, read.measurements)
        if read.cc_mode != self.policy.cc_mode:
            self.fail("cc_mode", component, self.policy.cc_mode, read.cc_mode)

    def check_gpu_measurements(self, component: str, measurements: Mapping[str, str]) -> None:
        """Every measurement the policy names, each a reference digest; and no other."""
        allowed_digests = self.reference.gpu
        for name in self.policy.gpu_measurements:
            value = measurements.get(name)
            if value is None:
                self.fail("gpu_measurement", f"{component}.{name}", f"a {name} measurement", "none")
                continue
            self.measurements[f"{component}.{name}"] = value
            if value not in allowed_digests.get(name, ()):
                self.fail_unaccepted(
                    "gpu_measurement", f"{component}.{name}", GPU_PREFIX + name, f"a reference digest of {name}", value
                )
        for name in sorted(measurements.keys() - set(self.policy.gpu_measurements)):
            self.fail("gpu_measurement", f"{component}.{name}", "only the measurements the policy names", name)


@dataclass(frozen=True)
class _GPUReport:
    """A GPU report's fields, each well-formed (not yet checked against anything)."""

    uuid: str
    nonce: str
    cc_mode: str
    measurements: Mapping[str, str]
    signature: bytes
    chain: tuple[str, ...]
    signed: bytes  # what the device key signed


def _read_gpu_report(report: Mapping[str, object], where: str) -> _GPUReport:
    """Raises validation.Invalid, naming the place, for a field off its shape."""
    uuid = _name(report.get("uuid"), f"{where}.uuid")
    nonce = _name(report.get("nonce"), f"{where}.nonce", limit=2 * 64)
    cc_mode = _name(report.get("cc_mode"), f"{where}.cc_mode")
    measurements = validation.mapping(
        report.get("measurements"),
        f"{where}.measurements",
        max_items=MAX_MEASUREMENTS,
        expected="an object of name -> digest",
    )
    for name, value in measurements.items():
        _name(name, f"{where}.measurements")
        _name(value, f"{where}.measurements.{name}", limit=128)
    signature = _base64(report.get("signature"), f"{where}.signature", MAX_SIGNATURE_BYTES)
    chain_pems = validation.sequence(
        report.get("cert_chain"),
        f"{where}.cert_chain",
        min_items=1,
        max_items=MAX_CHAIN_CERTS,
        expected=f"a list of 1 to {MAX_CHAIN_CERTS} PEM certificates",
    )
    chain = _pem_chain(chain_pems, [f"{where}.cert_chain[{i}]" for i in range(len(chain_pems))])
    try:
        signed = _canonical_gpu_report(report)
    except (TypeError, ValueError, RecursionError) as err:
        raise validation.Invalid(where, "must be a report of JSON values", str(err)) from None
    return _GPUReport(uuid, nonce, cc_mode, measurements, signature, chain, signed)


@dataclass(frozen=True)
class _Leaf:
    certificate: x509.Certificate
    public_key: object
    chain: tuple[x509.Certificate, ...]


def _trust_anchor(pem: object, valid_at: datetime | None) -> x509.Certificate:
    if not isinstance(pem, str) or not pem.strip():
        raise ValueError("no PEM certificate")
    try:
        count = len(x509.load_pem_x509_certificates(pem.encode()))
        certificate = _load_certificate(pem)
    except Exception as err:  # as in _pem_chain: whatever cryptography raises, the text is no certificate
        raise ValueError(f"not a PEM certificate: {err}") from None
    if count != 1:
        raise ValueError(f"{count} certificates in the PEM text; an anchor is one CA certificate")
    try:
        is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError(f"{certificate.subject.rfc4514_string()} is not a CA certificate (no basicConstraints cA)")
    key = certificate.public_key()
    if not _issuer_key_supported(key):
        raise ValueError(
            f"its {_key_kind(key)} key is not one chains are checked with: ECDSA P-256, P-384 or P-521,"
            f" or RSA of at least {MIN_ISSUER_RSA_BITS} bits"
        )
    problem = _issuer_problem(certificate)
    if problem is not None:
        raise ValueError(f"the path validator refuses it as an issuer: {problem}")
    if valid_at is not None and not certificate.not_valid_before_utc <= valid_at <= certificate.not_valid_after_utc:
        raise ValueError(
            f"valid from {certificate.not_valid_before_utc.isoformat()} to"
            f" {certificate.not_valid_after_utc.isoformat()}, not at {valid_at.isoformat()}"
        )
    return certificate


def _issuer_key_supported(key: object) -> bool:
    if isinstance(key, ec.EllipticCurvePublicKey):
        return isinstance(key.curve, ISSUER_CURVES)
    return isinstance(key, rsa.RSAPublicKey) and key.key_size >= MIN_ISSUER_RSA_BITS


def _key_kind(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA {key.curve.name}"
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA {key.key_size}-bit"
    return type(key).__name__.removesuffix("PublicKey")


def _issuer_problem(anchor: x509.Certificate) -> str | None:
    """What the path validator refuses in `anchor` as the issuer of a leaf, or None.

    Its rules for an issuer's extensions are many, so the validator itself is asked, of a stand-in:
    the anchor's subject, validity and extensions with a throwaway key (the anchor's own key
    cannot sign here), issuing a throwaway leaf.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        extensions = [
            (x509.UnrecognizedExtension(e.oid, e.value.public_bytes()), e.critical) for e in anchor.extensions
        ]
    except Exception as err:  # an extension cryptography parses but cannot encode again: not one to trust blindly
        return f"an extension that cannot be re-encoded: {type(err).__name__}: {err}"
    stand_in = _issued(anchor.subject, anchor.subject, key, anchor, extensions)
    leaf = _issued(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe")]), anchor.subject, key, anchor, [])
    try:
        _chain_verifier(stand_in, anchor.not_valid_before_utc).verify(leaf, [])
    except (verification.VerificationError, ValueError) as err:
        return str(err).removeprefix("validation failed: ").removeprefix("candidates exhausted: ")
    return None


def _issued(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    validity: x509.Certificate,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity.not_valid_before_utc)
        .not_valid_after(validity.not_valid_after_utc)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(key, hashes.SHA256())


def _chain_verifier(root: x509.Certificate, at: datetime) -> verification.ClientVerifier:
    return (
        verification.PolicyBuilder()
        .store(verification.Store([root]))
        .time(at)
        .extension_policies(
            ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(),
            ee_policy=verification.ExtensionPolicy.permit_all(),
        )
        .build_client_verifier()
    )


@functools.lru_cache(maxsize=CHAIN_CACHE_SIZE)
def _verified_chain(pems: tuple[str, ...], root: x509.Certificate) -> tuple[_Leaf, str | None]:
    """Verify signatures, names and constraints of a chain once; validity at `now` is the caller's.

    The path is built at the leaf's notBefore, a time that depends only on the chain, so the
    answer can be cached: re-verifying the same PEM text at every attestation would cost more
    than the evidence's own signatures.
    """
    certificates = tuple(_load_certificate(pem) for pem in pems)
    leaf = certificates[0]
    result = _Leaf(leaf, leaf.public_key(), certificates)
    try:
        _chain_verifier(root, leaf.not_valid_before_utc).verify(leaf, list(certificates[1:]))
    except (verification.VerificationError, ValueError) as err:
        return result, str(err)
    try:
        basic = leaf.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound as err:
        return result, f"a leaf without {err.oid.dotted_string}"
    if basic.ca or not usage.digital_signature:
        return result, "a leaf that is a CA or may not sign"
    return result, None


@functools.lru_cache(maxsize=CHAIN_CACHE_SIZE)
def _load_certificate(pem: str) -> x509.Certificate:
    certificate = x509.load_pem_x509_certificate(pem.encode())
    # The parser is lazy: touch every field we read now, so a broken one is malformed here and not
    # an exception in the middle of a check.
    certificate.subject.rfc4514_string()
    certificate.issuer.rfc4514_string()
    certificate.public_key()
    _ = certificate.version, certificate.extensions, certificate.not_valid_before_utc, certificate.not_valid_after_utc
    # A CA signs in whole octets. The path validator accepts the signature's BIT STRING re-encoded
    # with unused bits, an encoding no honest issuer emits: refuse it rather than trust the leniency.
    der = certificate.public_bytes(serialization.Encoding.DER)
    if der[-len(certificate.signature) - 1] != 0:
        raise ValueError("the signature BIT STRING declares unused bits")
    return certificate


def _pem_chain(pems: list[object], components: list[str]) -> tuple[str, ...]:
    for pem, component in zip(pems, components, strict=True):
        validation.text(
            pem,
            component,
            max_length=MAX_PEM_CHARS,
            expected=f"a PEM certificate of at most {MAX_PEM_CHARS} characters",
        )
        try:
            _load_certificate(pem)
        # cryptography reports broken certificates with many exception types (ValueError, TypeError,
        # InvalidVersion, DuplicateExtension, UnsupportedAlgorithm...): any of them means malformed.
        except Exception as err:
            raise validation.Invalid(component, "must be a PEM certificate", str(err)) from None
    return tuple(pems)


# TPM structures.


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
            r, s = reader.tpm2b(), reader.tpm2b()
        except ValueError:
            return None
        if reader.offset != len(signature) - 4:
            return None
        return encode_dss_signature(int.from_bytes(r, "big"), int.from_bytes(s, "big"))
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
        failures.append(Failure("nonce_mismatch", "quote.attest", nonce.hex(), _shown(quote.extra_data.hex())))
    if pcrs is None:
        return
    wanted = ((TPM_ALG_SHA256, tuple(sorted(pcrs))),)
    selected = tuple((alg, pcrs_) for alg, pcrs_ in quote.pcr_select if pcrs_)
    if selected != wanted:
        failures.append(
            Failure("pcr_selection", "quote.attest", _selection_text(wanted), _shown(_selection_text(selected)))
        )
        return  # a digest over other PCRs cannot be compared with the replay
    digest = hashlib.sha256(b"".join(pcrs[i] for i in sorted(pcrs))).digest()
    if digest != quote.pcr_digest:
        failures.append(Failure("pcr_digest", "quote.attest", digest.hex(), _shown(quote.pcr_digest.hex())))


def _selection_text(banks: tuple[tuple[int, tuple[int, ...]], ...]) -> str:
    names = {TPM_ALG_SHA256: "sha256"}
    return "; ".join(f"{names.get(alg, hex(alg))}:{','.join(map(str, pcrs))}" for alg, pcrs in banks) or "none"


# GPU reports.


def _canonical_gpu_report(report: dict) -> bytes:
    """What the device signed: the report without signature and chain, sorted compact JSON."""
    unsigned = {k: v for k, v in report.items() if k not in ("signature", "cert_chain")}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def _verifies_p384(public_key: object, signature: bytes, message: bytes) -> bool:
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(public_key.curve, ec.SECP384R1):
        return False
    try:
        public_key.verify(signature, message, ec.ECDSA(hashes.SHA384()))
    except InvalidSignature:
        return False
    return True


# Field parsing: each raises core.validation.Invalid naming where, which `guarded` makes a failure.


def _base64(value: object, where: str, limit: int) -> bytes:
    validation.text(value, where, max_length=2 * limit, expected=f"base64 of at most {limit} bytes")
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise validation.Invalid(where, "must be base64", str(err)) from None
    if not decoded or len(decoded) > limit:
        raise validation.Invalid(where, f"must be base64 of 1 to {limit} bytes", f"{len(decoded)} bytes")
    return decoded


def _hex(value: object, where: str, size: int) -> bytes:
    return bytes.fromhex(
        validation.matches(value, where, re.compile(f"[0-9a-fA-F]{{{2 * size}}}"), f"{2 * size} hex digits")
    )


def _name(value: object, where: str, limit: int = MAX_NAME_CHARS) -> str:
    return validation.text(value, where, max_length=limit)


def _attribute(name: x509.Name, oid: x509.ObjectIdentifier) -> str | None:
    values = name.get_attributes_for_oid(oid)
    return str(values[0].value) if len(values) == 1 else None


def _indexes(enrolled: Mapping[int, GPUIdentity]) -> str:
    return ", ".join(map(str, sorted(enrolled))) or "none enrolled"


def _describe(value: object) -> str:
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, list | dict):  # too many, or too few, of them
        return f"a list of {len(value)} items" if isinstance(value, list) else f"an object of {len(value)} entries"
    kinds = {type(None): "nothing", bool: "a boolean", int: "a number"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _shown(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"
