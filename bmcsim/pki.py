"""The simulated manufacturer CA, GPU-vendor root, GPU device identity CA, GPU RIM signing root,
and the keys and certificates they issue.

The roots and a 32-byte seed are generated once per data directory and kept there. Node
attestation keys (ECDSA P-256) and GPU device keys (ECDSA P-384) are derived from the seed on
demand, so 10,000 nodes with 80,000 GPUs cost nothing until asked for evidence; each
certificate is issued on first use and stored, so evidence stays verifiable across restarts.

The device identity CA is the root of the GPUs' SPDM identities, as NVIDIA's Device Identity CA
is of its GPUs': a provisioner CA under it issues each GPU's leaf (the GSP firmware's, P-384) for
the firmware's FWID, in the TCG DICE extension of NVIDIA's Hopper layout.
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
    subject: x509.Name,
    public_key,
    issuer: x509.Certificate | None,
    issuer_key,
    *,
    ca: bool,
    extensions: tuple[x509.ExtensionType, ...] = (),
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
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(issuer_key, hashes.SHA384() if isinstance(issuer_key.curve, ec.SECP384R1) else hashes.SHA256())


# The TCG DICE FWID extension as NVIDIA's Hopper leaves carry it: SEQUENCE { INTEGER 1, the leaf's
# SubjectPublicKeyInfo, FWID SEQUENCE { hashAlg OID, digest OCTET STRING } }; the verifier
# (attestation.verifier.spdm) reads the FWID, the last element.
HOPPER_FWID_EXTENSION = x509.ObjectIdentifier("2.23.133.5.4.1")
DER_INTEGER_1 = bytes.fromhex("020101")
DER_SHA384_OID = bytes.fromhex("0609608648016503040202")  # 2.16.840.1.101.3.4.2.2


def _der(tag: int, contents: bytes) -> bytes:
    size = len(contents)
    if size < 0x80:
        return bytes([tag, size]) + contents
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + contents


def hopper_fwid_extension(public_key: ec.EllipticCurvePublicKey, fwid: bytes) -> x509.UnrecognizedExtension:
    spki = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    fwid_der = _der(0x30, DER_SHA384_OID + _der(0x04, fwid))
    return x509.UnrecognizedExtension(HOPPER_FWID_EXTENSION, _der(0x30, DER_INTEGER_1 + spki + fwid_der))


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class PKI:
    def __init__(self, directory: Path, store: Store):
        self._dir = directory
        self._store = store
        self._aks: dict[str, tuple[ec.EllipticCurvePrivateKey, str]] = {}
        self._gpu_keys: dict[str, tuple[ec.EllipticCurvePrivateKey, list[str]]] = {}
        self._spdm: dict[tuple[str, bytes, bool], tuple[ec.EllipticCurvePrivateKey, list[str]]] = {}
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

        self.device_identity_key, self.device_identity_ca = self._root(
            "gpu-device-identity-ca", "bmcsim Device Identity CA"
        )
        self.provisioner_key, self.provisioner_ca = self._intermediate(
            "gpu-provisioner-ca", "bmcsim GH100 Provisioner ICA", self.device_identity_ca, self.device_identity_key
        )
        # What a forged leaf claims as its issuer: the provisioner's name, with a key of no root's.
        self.forger_key = self._derive(ec.SECP384R1(), "gpu-forger-ca")

        # Signs the GPUs' reference integrity manifests (bmcsim/gpu_rims.py), as NVIDIA's RIM
        # signing root does through its signers.
        self.rim_root_key, self.rim_root = self._root("gpu-rim-root", "bmcsim RIM Signing Root CA")
        self.rim_signer_key = self._derive(ec.SECP384R1(), "gpu-rim-signer")
        self.rim_signer = self._cert(
            "gpu-rim-signer",
            lambda: _issue(
                _name("bmcsim RIM Signer"), self.rim_signer_key.public_key(), self.rim_root, self.rim_root_key, ca=False
            ),
        )

    def _intermediate(
        self, label: str, common_name: str, issuer: x509.Certificate, issuer_key: ec.EllipticCurvePrivateKey
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = self._derive(ec.SECP384R1(), label)
        return key, self._cert(label, lambda: _issue(_name(common_name), key.public_key(), issuer, issuer_key, ca=True))

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

    def spdm_identity(
        self, gpu_uuid: str, serial: str, fwid: bytes, *, forged: bool = False
    ) -> tuple[ec.EllipticCurvePrivateKey, list[str]]:
        """A GPU's SPDM key for its firmware's FWID and its chain (leaf, provisioner CA), as its
        Certificate serves it; the device identity CA is served apart. `forged`: the same key in a
        leaf that claims the provisioner as issuer but was signed by another key (a broken chain)."""
        cached = self._spdm.get((gpu_uuid, fwid, forged))
        if cached is None:
            key = self._derive(ec.SECP384R1(), f"spdm/{gpu_uuid}/{fwid.hex()}")
            signer = self.forger_key if forged else self.provisioner_key
            leaf = self._cert(
                f"spdm{'-forged' if forged else ''}/{gpu_uuid}/{fwid.hex()}",
                lambda: _issue(
                    _name(f"{gpu_uuid} GSP FMC LF", serial),
                    key.public_key(),
                    self.provisioner_ca,
                    signer,
                    ca=False,
                    extensions=(hopper_fwid_extension(key.public_key(), fwid),),
                ),
            )
            cached = self._spdm[(gpu_uuid, fwid, forged)] = (key, [_pem(leaf), _pem(self.provisioner_ca)])
        return cached

    def roots(self) -> dict[str, str]:
        """Every root, by the trust anchor role the control plane installs it as: the nodes' and the
        GPUs' device keys', and the simulated NVIDIA roots of the GPUs' SPDM identities and RIMs."""
        return {
            "manufacturer_ca": _pem(self.manufacturer_ca),
            "gpu_vendor_root": _pem(self.gpu_root),
            "nvidia_device_root": _pem(self.device_identity_ca),
            "nvidia_rim_root": _pem(self.rim_root),
        }

    def ocsp_issuers(self) -> tuple[tuple[x509.Certificate, ec.EllipticCurvePrivateKey], ...]:
        """The CAs that issue the GPU chains' certificates, with their keys: the OCSP responder answers for them."""
        return (
            (self.device_identity_ca, self.device_identity_key),
            (self.provisioner_ca, self.provisioner_key),
            (self.rim_root, self.rim_root_key),
        )
