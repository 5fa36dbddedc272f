"""NVIDIA's reference integrity manifests (RIMs): the golden measurements of one GPU driver or
VBIOS release, read and verified as NVIDIA's own verifiers (nvtrust, attestation-sdk) do.

A RIM is a SWID tag (ISO/IEC 19770-2:2015) with TCG's RIM attributes. `Meta` names the release
(`colloquialVersion`: "550.144.03" for a driver, "96.00.5E.00.01" for a VBIOS) and the chip
(`product`: "GH100"); `Payload` holds a `Resource` per measurement index, `active` or not, with
`alternatives` SHA-384 digests `Hash0`, `Hash1`.. (attributes in the xmlenc#sha384 namespace),
any one of which is golden. An enveloped XML-DSig signature (ECDSA P-384 over SHA-384) covers
the whole document; its KeyInfo carries the signing chain, leaf first, up to NVIDIA's RIM root.

Untrusted XML is parsed by lxml with entities unresolved, no network, no huge trees, and any DTD
refused; the signature is checked by signxml. Offline: NVIDIA's verifiers also ask NVIDIA's OCSP
responder whether a certificate of the chain was revoked, which this does not.
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature as InvalidCertificateSignature
from cryptography.exceptions import UnsupportedAlgorithm
from lxml import etree
from signxml import (
    DigestAlgorithm,
    InvalidDigest,
    InvalidSignature,
    SignatureConfiguration,
    SignatureMethod,
    XMLVerifier,
)

from attestation.verifier.chains import load_certificate
from attestation.verifier.fields import (
    MAX_PEM_CHARS,
    MAX_RIM_ALTERNATIVES,
    MAX_RIM_BYTES,
    MAX_RIM_CERTS,
    MAX_RIM_MEASUREMENTS,
)
from attestation.verifier.verdict import shown
from core import validation

SWID = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
SHA384 = "http://www.w3.org/2001/04/xmlenc#sha384"
DSIG = "http://www.w3.org/2000/09/xmldsig#"
DRIVER, VBIOS = "driver", "vbios"
# The RIM says nothing else of which it is: NVIDIA names the file (NV_GPU_DRIVER_GH100_550.144.03,
# NV_GPU_VBIOS_1010_0200_882_96005E0001) after the version its verifier read from the evidence.
DRIVER_VERSION = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){1,3}")
VBIOS_VERSION = re.compile(r"[0-9a-f]{2}(\.[0-9a-f]{2}){4}")
DIGEST_BYTES = 48
# What NVIDIA signs RIMs with; a RIM signed otherwise is refused, not guessed at.
SIGNATURE = SignatureConfiguration(
    location="./",  # the Signature is a child of SoftwareIdentity
    expect_references=1,
    signature_methods=frozenset({SignatureMethod.ECDSA_SHA384}),
    digest_algorithms=frozenset({DigestAlgorithm.SHA384}),
)
# The extensions a certificate of the chain may mark critical: those this module checks.
KNOWN_CRITICAL = {x509.BasicConstraints.oid, x509.KeyUsage.oid}
HEX_DIGEST = re.compile(f"[0-9a-fA-F]{{{2 * DIGEST_BYTES}}}")
DECIMAL = re.compile("[0-9]{1,4}")

Extension = TypeVar("Extension", bound=x509.ExtensionType)
RIM_CACHE_SIZE = 64  # RIMs examined and kept: the drivers and VBIOS releases a fleet runs


@dataclass(frozen=True)
class GoldenMeasurement:
    active: bool  # NVIDIA's verifiers compare only the active ones
    alternatives: tuple[str, ...]  # lowercase hex SHA-384 digests, any one of which is golden
    # The same as bytes, to compare with measurements unconverted: a report has 64 of them.
    digests: frozenset[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digests", frozenset(bytes.fromhex(digest) for digest in self.alternatives))


@dataclass(frozen=True)
class Rim:
    """What a RIM says. Nothing of it is trusted before verify_rim finds no failure."""

    component: str  # DRIVER or VBIOS
    version: str  # its colloquialVersion in lowercase, as NVIDIA's verifiers compare it
    chip: str  # the GPU's chip ("GH100")
    tag_id: str
    valid_from: datetime  # when every certificate of the signing chain is valid
    valid_until: datetime
    golden: Mapping[int, GoldenMeasurement]  # by measurement index (an SPDM block's index - 1)


def read_rim(xml: bytes) -> Rim:
    """The RIM's identity and golden measurements; validation.Invalid naming where for one off its shape."""
    return _examined(xml).rim


def signing_chain(xml: bytes) -> tuple[x509.Certificate, ...]:
    """The certificates the RIM carries, its signer first (for their revocation); validation.Invalid
    naming where for a RIM off its shape."""
    return _examined(xml).chain


def verify_rim(rim_xml: bytes, *, root: x509.Certificate, at: datetime) -> list[str]:
    """Why the RIM is not one NVIDIA signed, valid at `at` (the evidence's time); empty when it is.

    Each reason begins with what failed: `malformed`, `chain` (it does not end at `root`, or a
    certificate may not sign what it signs), `validity` (a certificate is not valid at `at`) or
    `signature`. Never raises, whatever the bytes.
    """
    try:
        examined = _examined(rim_xml)
    except validation.Invalid as error:
        return [f"malformed: {error}"]
    chain_failures, linked = _chain_failures(examined.chain, root)
    validity = _validity_failures(examined.chain, root, at) if linked else []
    return [*chain_failures, *validity, *examined.signature_failures]


@dataclass(frozen=True)
class _Examined:
    """What a RIM's bytes say, and whether its signature verifies with its signer's key: the same at
    every evidence's time, so kept for the RIMs in use (every inspection checks the same few)."""

    rim: Rim
    chain: tuple[x509.Certificate, ...]
    signature_failures: tuple[str, ...]


@functools.lru_cache(maxsize=RIM_CACHE_SIZE)
def _examined(xml: bytes) -> _Examined:
    document = _parse(xml)
    rim, chain = _read(document)
    return _Examined(rim, chain, tuple(_signature_failures(document, chain[0])))


def compare_measurements(golden: Mapping[int, GoldenMeasurement], measured: Mapping[int, bytes]) -> list[str]:
    """Every active golden index that `measured` (by the same index) lacks or does not match."""
    failures = []
    for index, measurement in sorted(golden.items()):
        if not measurement.active:
            continue
        value = measured.get(index)
        if value is None:
            failures.append(f"index {index}: not measured")
        elif value not in measurement.digests:
            expected = " or ".join(measurement.alternatives)
            failures.append(f"index {index}: measured {shown(value.hex())}, expected {shown(expected)}")
    return failures


def _parse(xml: bytes) -> etree._Element:
    if not isinstance(xml, bytes) or not 0 < len(xml) <= MAX_RIM_BYTES:
        size = f"{len(xml)} bytes" if isinstance(xml, bytes) else type(xml).__name__
        raise validation.Invalid("rim", f"must be an XML document of 1 to {MAX_RIM_BYTES} bytes", size)
    # A parser a call: lxml's parsers keep state and are not to be shared between threads.
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        document = etree.fromstring(xml, parser)
    except (etree.LxmlError, ValueError) as error:
        raise validation.Invalid("rim", "must be well-formed XML", str(error)) from None
    # No RIM declares a DTD; a DTD is how entity bombs and external entities come in.
    if document.getroottree().docinfo.doctype:
        raise validation.Invalid("rim", "must not declare a DTD")
    return document


def _read(document: etree._Element) -> tuple[Rim, tuple[x509.Certificate, ...]]:
    if document.tag != f"{{{SWID}}}SoftwareIdentity":
        raise validation.Invalid("rim", "must be a SWID tag (SoftwareIdentity, ISO/IEC 19770-2:2015)", document.tag)
    tag_id = _attribute(document, "tagId", "rim")
    meta = _child(document, SWID, "Meta", "rim")
    edition = _attribute(meta, "edition", "rim.Meta")
    if edition != "GPU":
        raise validation.Invalid("rim.Meta.edition", 'must be "GPU" (a GPU driver or VBIOS)', edition)
    chip = _attribute(meta, "product", "rim.Meta")
    version = _attribute(meta, "colloquialVersion", "rim.Meta").lower()
    if VBIOS_VERSION.fullmatch(version):
        component = VBIOS
    elif DRIVER_VERSION.fullmatch(version):
        component = DRIVER
    else:
        raise validation.Invalid(
            "rim.Meta.colloquialVersion", "must be a driver (550.144.03) or VBIOS (96.00.5E.00.01) version", version
        )
    golden = _golden(_child(document, SWID, "Payload", "rim"))
    chain = _signing_chain(document)
    valid_from = max(certificate.not_valid_before_utc for certificate in chain)
    valid_until = min(certificate.not_valid_after_utc for certificate in chain)
    return Rim(component, version, chip, tag_id, valid_from, valid_until, golden), chain


def _golden(payload: etree._Element) -> Mapping[int, GoldenMeasurement]:
    resources = list(payload.iterchildren(etree.Element))
    if not 0 < len(resources) <= MAX_RIM_MEASUREMENTS:
        raise validation.Invalid(
            "rim.Payload", f"must hold 1 to {MAX_RIM_MEASUREMENTS} measurements", f"{len(resources)} elements"
        )
    golden: dict[int, GoldenMeasurement] = {}
    for position, resource in enumerate(resources):
        where = f"rim.Payload.Resource[{position}]"
        if resource.tag != f"{{{SWID}}}Resource" or resource.get("type") != "Measurement":
            raise validation.Invalid(where, 'must be a Resource of type "Measurement"', resource.tag)
        index = _number(resource, "index", where, MAX_RIM_MEASUREMENTS - 1)
        if index in golden:
            raise validation.Invalid(f"{where}.index", "must be unique in the RIM", index)
        active = validation.one_of(_attribute(resource, "active", where), f"{where}.active", ("True", "False"))
        if _number(resource, "size", where, DIGEST_BYTES) != DIGEST_BYTES:
            raise validation.Invalid(f"{where}.size", f"must be {DIGEST_BYTES} (SHA-384)")
        count = _number(resource, "alternatives", where, MAX_RIM_ALTERNATIVES)
        if count == 0:
            raise validation.Invalid(f"{where}.alternatives", f"must be from 1 to {MAX_RIM_ALTERNATIVES}", count)
        alternatives = tuple(
            validation.matches(
                resource.get(f"{{{SHA384}}}Hash{n}"),
                f"{where}.Hash{n}",
                HEX_DIGEST,
                f"{2 * DIGEST_BYTES} hex digits in the {SHA384} namespace",
            ).lower()
            for n in range(count)
        )
        golden[index] = GoldenMeasurement(active == "True", alternatives)
    return MappingProxyType(golden)


def _signing_chain(document: etree._Element) -> tuple[x509.Certificate, ...]:
    """The certificates of the RIM's one enveloped signature, which must sign the whole document."""
    signature = _child(document, DSIG, "Signature", "rim")
    references = signature.findall(f"{{{DSIG}}}SignedInfo/{{{DSIG}}}Reference")
    # URI "" (with the enveloped-signature transform) is the whole document but the signature:
    # what read_rim reads is then all signed.
    if len(references) != 1 or references[0].get("URI") != "":
        raise validation.Invalid("rim.Signature.SignedInfo", 'must sign the whole RIM: one Reference, URI ""')
    texts = signature.findall(f"{{{DSIG}}}KeyInfo/{{{DSIG}}}X509Data/{{{DSIG}}}X509Certificate")
    if not 0 < len(texts) <= MAX_RIM_CERTS:
        raise validation.Invalid(
            "rim.Signature.KeyInfo.X509Data", f"must hold 1 to {MAX_RIM_CERTS} certificates", len(texts)
        )
    chain = []
    for position, text in enumerate(texts):
        where = f"rim.Signature.KeyInfo.X509Data.X509Certificate[{position}]"
        encoded = "".join((text.text or "").split())
        if len(encoded) > MAX_PEM_CHARS:
            raise validation.Invalid(where, f"must be a certificate of at most {MAX_PEM_CHARS} characters")
        pem = "-----BEGIN CERTIFICATE-----\n" + "\n".join(textwrap.wrap(encoded, 64)) + "\n-----END CERTIFICATE-----\n"
        try:
            chain.append(load_certificate(pem))
        # As in chains.pem_chain: whatever cryptography raises, the text is no certificate.
        except Exception as error:
            raise validation.Invalid(where, "must be a base64 DER certificate", str(error)) from None
    return tuple(chain)


@functools.lru_cache(maxsize=RIM_CACHE_SIZE)
def _chain_failures(chain: tuple[x509.Certificate, ...], root: x509.Certificate) -> tuple[list[str], bool]:
    """The chain walked by hand, leaf to `root`, each link's signature and CA rights (validity is
    _validity_failures'); and whether every link is signed by the next, up to the root.

    cryptography's path validator cannot walk it: NVIDIA's RIM CA certificates write dates before
    2050 as GeneralizedTime, which RFC 5280 forbids and the validator refuses ("validity dates
    between 1950 and 2049 must be UtcTime"); OpenSSL, which NVIDIA's verifiers use, lets it pass.
    """
    path = _path(chain, root)
    if not path or root in path:
        return ["chain: the RIM root must be the last certificate of the chain, after the signing one"], False
    issuers = [*path[1:], root]
    for certificate, issuer in zip(path, issuers, strict=True):
        try:
            certificate.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidCertificateSignature, UnsupportedAlgorithm):
            unlinked = (
                f"chain: {_name(certificate)} is not issued by {_name(issuer)}: it does not chain to the RIM root"
            )
            return [unlinked], False
    failures = [
        f"chain: {problem}" for below, issuer in enumerate(issuers) if (problem := _issuer_problem(issuer, below))
    ]
    leaf = path[0]
    usage = _extension(leaf, x509.KeyUsage)
    constraints = _extension(leaf, x509.BasicConstraints)
    if usage is None or not usage.digital_signature or constraints is None or constraints.ca:
        failures.append(f"chain: the signing certificate {_name(leaf)} is a CA or may not sign")
    for certificate in [*path, root]:
        unknown = [e.oid.dotted_string for e in certificate.extensions if e.critical and e.oid not in KNOWN_CRITICAL]
        if unknown:
            failures.append(
                f"chain: {_name(certificate)} has a critical extension this check does not know: {unknown[0]}"
            )
    return failures, True


def _validity_failures(chain: tuple[x509.Certificate, ...], root: x509.Certificate, at: datetime) -> list[str]:
    return [
        f"validity: {_name(certificate)} is valid from {certificate.not_valid_before_utc.isoformat()}"
        f" to {certificate.not_valid_after_utc.isoformat()}, not at {at.isoformat()}"
        for certificate in [*_path(chain, root), root]
        if not certificate.not_valid_before_utc <= at <= certificate.not_valid_after_utc
    ]


def _path(chain: tuple[x509.Certificate, ...], root: x509.Certificate) -> list[x509.Certificate]:
    return list(chain[:-1] if chain[-1] == root else chain)  # NVIDIA's RIMs carry the root too


def _issuer_problem(issuer: x509.Certificate, below: int) -> str | None:
    """What forbids `issuer` to sign a certificate with `below` CA certificates under it."""
    constraints = _extension(issuer, x509.BasicConstraints)
    usage = _extension(issuer, x509.KeyUsage)
    if constraints is None or not constraints.ca:
        return f"{_name(issuer)} is not a CA"
    if constraints.path_length is not None and below > constraints.path_length:
        return f"{_name(issuer)} may have {constraints.path_length} CAs below it, not {below}"
    if usage is not None and not usage.key_cert_sign:
        return f"{_name(issuer)} may not sign certificates (keyUsage)"
    return None


def _signature_failures(document: etree._Element, leaf: x509.Certificate) -> list[str]:
    # The signing certificate's validity is the chain check's: signxml checks the signature alone,
    # at a time the certificate is valid.
    config = replace(SIGNATURE, verification_time=leaf.not_valid_before_utc)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        XMLVerifier().verify(document, x509_cert=leaf, parser=parser, expect_config=config)
    except InvalidDigest:
        return ["signature: the RIM was changed after it was signed (the digest of its content differs)"]
    except InvalidSignature:
        return ["signature: does not verify with the signing certificate's key"]
    # signxml and lxml refuse a signature off the XML-DSig schema, or with an algorithm NVIDIA does
    # not sign with, under many exception types: each means malformed.
    except Exception as error:
        return [f"malformed: rim.Signature: {type(error).__name__}: {shown(str(error))}"]
    return []


def _child(element: etree._Element, namespace: str, name: str, where: str) -> etree._Element:
    found = element.findall(f"{{{namespace}}}{name}")
    if len(found) != 1:
        raise validation.Invalid(f"{where}.{name}", "must be there exactly once", f"{len(found)} elements")
    return found[0]


def _attribute(element: etree._Element, name: str, where: str) -> str:
    return validation.text(element.get(name), f"{where}.{name}", max_length=256)


def _number(element: etree._Element, name: str, where: str, maximum: int) -> int:
    text = validation.matches(element.get(name), f"{where}.{name}", DECIMAL, "a decimal number")
    return validation.integer(int(text), f"{where}.{name}", minimum=0, maximum=maximum)


def _extension(certificate: x509.Certificate, kind: type[Extension]) -> Extension | None:
    try:
        return certificate.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _name(certificate: x509.Certificate) -> str:
    return shown(certificate.subject.rfc4514_string())
