"""The fleet's metrics CA: Prometheus reads every node agent's /metrics with a certificate it issued.

`manage.py ensure_metrics_ca DIR [--server-name NAME ...]` makes one. A node holds the CA's
certificate only (gpu-agent --client-ca), never a secret that opens another node's metrics; the
CA's key stays in DIR, on the operator's side. DIR gets, each file written only while missing
(run it again and nothing changes, so agents keep trusting the same CA):

    ca.pem, ca.key               the CA
    prometheus.pem, .key         Prometheus' client certificate (the node-agents job's tls_config)
    server.pem, server.key       a TLS server certificate for the names given: bmcsim's agents'
                                 listener in the demo (default names: localhost, 127.0.0.1, ::1, bmcsim)

Keys are ECDSA P-256; the CA's key is 0600, the others 0640 (a scraper in the owner's group may
read its key: deploy/compose.yaml). Only the standard library and `cryptography`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core.certificates import key_usage

DEFAULT_SERVER_NAMES = ("localhost", "127.0.0.1", "::1", "bmcsim")
VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class MetricsCA:
    """Where the files of one metrics CA are."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def prometheus_cert(self) -> Path:
        return self.directory / "prometheus.pem"

    @property
    def prometheus_key(self) -> Path:
        return self.directory / "prometheus.key"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"


def ensure(directory: Path, server_names: Sequence[str] = DEFAULT_SERVER_NAMES) -> MetricsCA:
    """The CA in `directory`, made with what it issues where missing; what exists is kept."""
    ca = MetricsCA(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not (ca.ca_cert.exists() and ca.ca_key.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name("gpu-fleet metrics CA")
        _write(ca.ca_key, _key_pem(key), 0o600)
        _write(ca.ca_cert, _pem(_issue(name, key.public_key(), name, key, ca=True)), 0o644)
    issuer_key = serialization.load_pem_private_key(ca.ca_key.read_bytes(), password=None)
    if not isinstance(issuer_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca.ca_key} holds no EC private key")
    issuer = x509.load_pem_x509_certificate(ca.ca_cert.read_bytes()).subject
    leaves = [
        (ca.prometheus_cert, ca.prometheus_key, "prometheus", [ExtendedKeyUsageOID.CLIENT_AUTH], []),
        (ca.server_cert, ca.server_key, server_names[0], [ExtendedKeyUsageOID.SERVER_AUTH], server_names),
    ]
    for cert_path, key_path, common_name, usage, names in leaves:
        if cert_path.exists() and key_path.exists():
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(_name(common_name), key.public_key(), issuer, issuer_key, ca=False, usage=usage, names=names)
        _write(key_path, _key_pem(key), 0o640)
        _write(cert_path, _pem(cert), 0o644)
    return ca


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpu-fleet"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _issue(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    usage: Sequence[x509.ObjectIdentifier] = (),
    names: Sequence[str] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))  # a scraper whose clock is a little behind
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            key_usage(ca=ca),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if usage:  # a client certificate cannot serve TLS, nor a server's open /metrics
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Created with its mode, never readable by others first; an existing file is replaced whole."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.replace(partial, path)
