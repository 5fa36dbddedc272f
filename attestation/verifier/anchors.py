"""The trust anchors chains must end at: the TPM manufacturer's CA and the GPU vendor's root, each
refused up front when the path validator could never end a chain at it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from attestation.verifier.chains import chain_verifier, load_certificate

# The issuer keys cryptography's path validator (its WebPKI profile) verifies signatures of.
ISSUER_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
MIN_ISSUER_RSA_BITS = 2048


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


def _trust_anchor(pem: object, valid_at: datetime | None) -> x509.Certificate:
    if not isinstance(pem, str) or not pem.strip():
        raise ValueError("no PEM certificate")
    try:
        count = len(x509.load_pem_x509_certificates(pem.encode()))
        certificate = load_certificate(pem)
    except Exception as err:  # as in chains.pem_chain: whatever cryptography raises, the text is no certificate
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
        chain_verifier(stand_in, anchor.not_valid_before_utc).verify(leaf, [])
    except (verification.VerificationError, ValueError) as err:
        return str(err).removeprefix("validation failed: ").removeprefix("candidates exhausted: ")
    return None


def _issued(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    validity: x509.Certificate,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
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
