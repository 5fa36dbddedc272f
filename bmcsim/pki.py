"""The simulated manufacturer CA, GPU-vendor root, and the keys and certificates they issue.

The roots and a 32-byte seed are generated once per data directory and kept there. Node
attestation keys (ECDSA P-256) and GPU device keys (ECDSA P-384) are derived from the seed on
demand, so 10,000 nodes with 80,000 GPUs cost nothing until asked for evidence; each
certificate is issued on first use and stored, so evidence stays verifiable across restarts.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core.certificates import key_usage

from .store import Store, atomic_write

# Fixed validity so that a verifier's clock never makes simulated evidence expire.
NOT_BEFORE = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
NOT_AFTER = datetime.datetime(2045, 1, 1, tzinfo=datetime.UTC)
_ORDER = {
    "secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    "secp384r1": int(
        "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973", 16
    ),
}


def _name(common_name: str, serial: str | None = None) -> x509.Name:
    attrs = [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bmcsim"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ]
    if serial:
        attrs.append(x509.NameAttribute(NameOID.SERIAL_NUMBER, serial))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name, public_key, issuer: x509.Certificate | None, issuer_key, *, ca: bool
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            key_usage(ca=ca),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if issuer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA384() if isinstance(issuer_key.curve, ec.SECP384R1) else hashes.SHA256())


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class PKI:
    def __init__(self, directory: Path, store: Store):
        self._dir = directory
        self._store = store
        self._aks: dict[str, tuple[ec.EllipticCurvePrivateKey, str]] = {}
        self._gpu_keys: dict[str, tuple[ec.EllipticCurvePrivateKey, list[str]]] = {}
        seed_path = directory / "seed"
        if not seed_path.exists():
            atomic_write(seed_path, os.urandom(32))
        self._seed = seed_path.read_bytes()
        self.manufacturer_key, self.manufacturer_ca = self._root("manufacturer-ca", "bmcsim Manufacturer Root CA")
        self.gpu_root_key, self.gpu_root = self._root("gpu-vendor-root", "bmcsim GPU Vendor Root CA")
        self.gpu_ca_key = self._derive(ec.SECP384R1(), "gpu-vendor-device-ca")
        self.gpu_ca = self._cert(
            "gpu-vendor-device-ca",
            lambda: _issue(
                _name("bmcsim GPU Vendor Device CA"),
                self.gpu_ca_key.public_key(),
                self.gpu_root,
                self.gpu_root_key,
                ca=True,
            ),
        )

    def _root(self, label: str, common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key_path, cert_path = self._dir / f"{label}.key", self._dir / f"{label}.pem"
        if not key_path.exists():
            key = ec.generate_private_key(ec.SECP384R1())
            cert = _issue(_name(common_name), key.public_key(), None, key, ca=True)
            atomic_write(
                key_path,
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
            )
            atomic_write(cert_path, _pem(cert).encode(), mode=0o644)
        loaded = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} holds no EC private key")
        return loaded, x509.load_pem_x509_certificate(cert_path.read_bytes())

    def _derive(self, curve: ec.EllipticCurve, label: str) -> ec.EllipticCurvePrivateKey:
        order = _ORDER[curve.name]
        scalar = int.from_bytes(hmac.new(self._seed, label.encode(), hashlib.sha512).digest()) % (order - 1) + 1
        return ec.derive_private_key(scalar, curve)

    def _cert(self, label: str, issue) -> x509.Certificate:
        pem = self._store.get_cert(label)
        if pem is None:
            pem = _pem(issue())
            self._store.put_cert(label, pem)
        return x509.load_pem_x509_certificate(pem.encode())

    def attestation_key(self, node: str, serial: str) -> tuple[ec.EllipticCurvePrivateKey, str]:
        """The node's AK and its certificate (PEM), CN = node name, serialNumber = node serial."""
        if node not in self._aks:
            key = self._derive(ec.SECP256R1(), f"ak/{node}")
            cert = self._cert(
                f"ak/{node}",
                lambda: _issue(
                    _name(node, serial), key.public_key(), self.manufacturer_ca, self.manufacturer_key, ca=False
                ),
            )
            self._aks[node] = (key, _pem(cert))
        return self._aks[node]

    def gpu_key(self, gpu_uuid: str, serial: str) -> tuple[ec.EllipticCurvePrivateKey, list[str]]:
        """A GPU's device key and its chain (device cert, vendor device CA); the root is served apart."""
        if gpu_uuid not in self._gpu_keys:
            key = self._derive(ec.SECP384R1(), f"gpu/{gpu_uuid}")
            cert = self._cert(
                f"gpu/{gpu_uuid}",
                lambda: _issue(_name(gpu_uuid, serial), key.public_key(), self.gpu_ca, self.gpu_ca_key, ca=False),
            )
            self._gpu_keys[gpu_uuid] = (key, [_pem(cert), _pem(self.gpu_ca)])
        return self._gpu_keys[gpu_uuid]

    def roots(self) -> dict[str, str]:
        return {"manufacturer_ca": _pem(self.manufacturer_ca), "gpu_vendor_root": _pem(self.gpu_root)}
