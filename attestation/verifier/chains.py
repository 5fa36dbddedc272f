"""Certificate chains: the PEM texts of the evidence, loaded and verified up to a trusted root."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509 import verification

from attestation.verifier.fields import MAX_PEM_CHARS
from core import validation

CHAIN_CACHE_SIZE = 16_384


@dataclass(frozen=True)
class Leaf:
    certificate: x509.Certificate
    public_key: object
    chain: tuple[x509.Certificate, ...]


def chain_verifier(root: x509.Certificate, at: datetime) -> verification.ClientVerifier:
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
def verified_chain(pems: tuple[str, ...], root: x509.Certificate) -> tuple[Leaf, str | None]:
    """Verify signatures, names and constraints of a chain once; validity at `now` is the caller's.

    The path is built at the leaf's notBefore, a time that depends only on the chain, so the
    answer can be cached: re-verifying the same PEM text at every attestation would cost more
    than the evidence's own signatures.
    """
    certificates = tuple(load_certificate(pem) for pem in pems)
    leaf = certificates[0]
    result = Leaf(leaf, leaf.public_key(), certificates)
    try:
        chain_verifier(root, leaf.not_valid_before_utc).verify(leaf, list(certificates[1:]))
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
def load_certificate(pem: str) -> x509.Certificate:
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


def pem_chain(pems: list[object], components: list[str]) -> tuple[str, ...]:
    """The chain's PEM texts, each a certificate; validation.Invalid naming the first that is not."""
    chain = []
    for pem, component in zip(pems, components, strict=True):
        text = validation.text(
            pem,
            component,
            max_length=MAX_PEM_CHARS,
            expected=f"a PEM certificate of at most {MAX_PEM_CHARS} characters",
        )
        try:
            load_certificate(text)
        # cryptography reports broken certificates with many exception types (ValueError, TypeError,
        # InvalidVersion, DuplicateExtension, UnsupportedAlgorithm...): any of them means malformed.
        except Exception as err:
            raise validation.Invalid(component, "must be a PEM certificate", str(err)) from None
        chain.append(text)
    return tuple(chain)


def name_attribute(name: x509.Name, oid: x509.ObjectIdentifier) -> str | None:
    values = name.get_attributes_for_oid(oid)
    return str(values[0].value) if len(values) == 1 else None
