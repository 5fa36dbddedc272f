"""A small CA, its leaf and OCSP answers about it, made with cryptography for the revocation tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(
    common_name: str,
    issuer: Issued | None = None,
    *,
    ca: bool = False,
    ocsp_signing: bool = False,
    responder: str | None = None,
) -> Issued:
    """A certificate valid from half a year before NOW for ten years (an answer's producedAt is
    the real time it was made), issued by `issuer` (None: self-signed)."""
    key = ec.generate_private_key(ec.SECP384R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(common_name))
        .issuer_name(issuer.certificate.subject if issuer else name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - 180 * DAY)
        .not_valid_after(NOW + 3650 * DAY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ocsp_signing:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.OCSP_SIGNING]), critical=False)
    if responder:
        access = x509.AccessDescription(AuthorityInformationAccessOID.OCSP, x509.UniformResourceIdentifier(responder))
        builder = builder.add_extension(x509.AuthorityInformationAccess([access]), critical=False)
    certificate = builder.sign(issuer.key if issuer else key, hashes.SHA384())
    return Issued(certificate, key)


def answer(
    certificate: x509.Certificate,
    issuer: Issued,
    *,
    status: ocsp.OCSPCertStatus = ocsp.OCSPCertStatus.GOOD,
    this_update: datetime = NOW - DAY,
    next_update: datetime | None = NOW + DAY,
    signer: Issued | None = None,
    revoked_at: datetime | None = None,
    reason: x509.ReasonFlags | None = None,
    include_signer: bool = False,
    by_name: bool = False,
) -> bytes:
    """A DER OCSP answer about `certificate`, signed by `signer` (default: the issuer) and naming
    it as the responder, by its key's hash or `by_name`."""
    signer = signer or issuer
    builder = (
        ocsp.OCSPResponseBuilder()
        .add_response(
            cert=certificate,
            issuer=issuer.certificate,
            algorithm=hashes.SHA1(),
            cert_status=status,
            this_update=this_update,
            next_update=next_update,
            revocation_time=revoked_at,
            revocation_reason=reason,
        )
        .responder_id(
            ocsp.OCSPResponderEncoding.NAME if by_name else ocsp.OCSPResponderEncoding.HASH, signer.certificate
        )
    )
    if include_signer:
        builder = builder.certificates([signer.certificate])
    return builder.sign(signer.key, hashes.SHA384()).public_bytes(serialization.Encoding.DER)
