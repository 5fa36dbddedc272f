"""The PKI of host attestation in tests: a manufacturer CA certifying a node's TPM attestation key (AK),
and CA roots such as the GPU vendor's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from attestation.verifier import NodeIdentity
from core.certificates import key_usage

# The node whose AK the manufacturer CA certifies: its certificate's CN and serialNumber.
NODE = NodeIdentity(name="gpu-node-01", serial="SN-7731-0001", gpus=())


def ca_certificate(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        certificate_builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(key_usage(ca=True), critical=True)
        .sign(key, hashes.SHA384())
    )
    return key, certificate.public_bytes(serialization.Encoding.PEM).decode()


def ak_certificate(ak_public_pem: str, ca: tuple[ec.EllipticCurvePrivateKey, str]) -> str:
    """What the operator's manufacturer CA issues for the AK public key create_attestation_key gives."""
    ca_key, ca_pem = ca
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, NODE.name),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, NODE.serial),
        ]
    )
    issuer = x509.load_pem_x509_certificate(ca_pem.encode()).subject
    certificate = (
        certificate_builder(subject, issuer, serialization.load_pem_public_key(ak_public_pem.encode()))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(ca=False), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA384())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def public_pem(public_key: ec.EllipticCurvePublicKey) -> str:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def certificate_builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
