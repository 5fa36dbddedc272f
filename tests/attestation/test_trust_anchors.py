"""Trust anchors: only a certificate the chains can end at is saved, and one that slipped in counts as missing."""

from __future__ import annotations

import datetime
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from django.core.management import CommandError, call_command

from attestation import services, verifier
from attestation.models import TrustAnchor
from attestation.verifier import chains
from bmcsim.pki import PKI
from bmcsim.store import Store

NOW = datetime.datetime.now(datetime.UTC)
ADD = "/admin/attestation/trustanchor/add/"
CA = x509.BasicConstraints(ca=True, path_length=None)


KEY_USAGES = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
    "encipher_only",
    "decipher_only",
)


def usage(*, ca: bool) -> x509.KeyUsage:
    """What a CA may do (sign certificates and CRLs), or what a leaf may (sign)."""
    granted = {"key_cert_sign", "crl_sign"} if ca else {"digital_signature"}
    return x509.KeyUsage(**{name: name in granted for name in KEY_USAGES})


CA_EXTENSIONS = ((CA, True), (usage(ca=True), True))


def certificate(
    key,
    extensions=CA_EXTENSIONS,
    *,
    subject: str = "Test Root CA",
    issuer: tuple[str, CertificateIssuerPrivateKeyTypes] | None = None,
    valid: tuple[datetime.datetime, datetime.datetime] = (
        NOW - datetime.timedelta(days=1),
        NOW + datetime.timedelta(days=365),
    ),
) -> x509.Certificate:
    """A certificate for `key`'s public half, self-signed unless `issuer` (name, private key) is given."""
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    digest = None if isinstance(issuer_key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(issuer_key, digest)


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


def p256():
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def bmcsim_roots(tmp_path_factory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("bmcsim-pki")
    return PKI(directory, Store(directory)).roots()


@pytest.fixture
def imported(db, bmcsim_roots) -> dict[str, str]:
    services.import_trust_anchors(bmcsim_roots)
    return bmcsim_roots


def chain_verifies(root_key, root: x509.Certificate) -> bool:
    """Whether the verifier's chain check accepts an AK certificate that `root_key` issued under `root`."""
    root_name = root.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert isinstance(root_name, str)
    ak = certificate(
        p256(),
        ((x509.BasicConstraints(ca=False, path_length=None), True), (usage(ca=False), True)),
        subject="node-001",
        issuer=(root_name, root_key),
    )
    _, problem = chains.verified_chain((pem(ak),), root)
    return problem is None


USABLE = {
    "ECDSA P-256": (p256, CA_EXTENSIONS),
    "ECDSA P-384": (lambda: ec.generate_private_key(ec.SECP384R1()), CA_EXTENSIONS),
    "ECDSA P-521": (lambda: ec.generate_private_key(ec.SECP521R1()), CA_EXTENSIONS),
    "RSA 2048": (lambda: rsa.generate_private_key(65537, 2048), CA_EXTENSIONS),
    "a non-critical keyUsage": (p256, ((CA, True), (usage(ca=True), False))),
    "a path length of 0": (p256, ((x509.BasicConstraints(ca=True, path_length=0), True), (usage(ca=True), True))),
    "a clientAuth extendedKeyUsage": (
        p256,
        (*CA_EXTENSIONS, (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)),
    ),
}
UNUSABLE = {
    "no basicConstraints": (p256, ((usage(ca=True), True),), "is not a CA certificate"),
    "an end-entity certificate": (
        p256,
        ((x509.BasicConstraints(ca=False, path_length=None), True), (usage(ca=False), True)),
        "is not a CA certificate",
    ),
    "a non-critical basicConstraints": (p256, ((CA, False), (usage(ca=True), True)), "incorrect criticality"),
    "no keyUsage": (p256, ((CA, True),), "2.5.29.15"),
    "a keyUsage without keyCertSign": (
        p256,
        ((CA, True), (usage(ca=False), True)),
        "keyCertSign must be asserted",
    ),
    "a serverAuth-only extendedKeyUsage": (
        p256,
        (*CA_EXTENSIONS, (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)),
        "EKU",
    ),
    "an unknown critical extension": (
        p256,
        (*CA_EXTENSIONS, (x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"\x05\x00"), True)),
        "unaccounted-for critical extensions",
    ),
    "an Ed25519 key": (ed25519.Ed25519PrivateKey.generate, CA_EXTENSIONS, "its Ed25519 key is not one"),
    "a secp256k1 key": (lambda: ec.generate_private_key(ec.SECP256K1()), CA_EXTENSIONS, "its ECDSA secp256k1 key"),
    "RSA 1024": (lambda: rsa.generate_private_key(65537, 1024), CA_EXTENSIONS, "its RSA 1024-bit key"),
}


@pytest.mark.parametrize(("make_key", "extensions"), USABLE.values(), ids=USABLE.keys())
def test_a_ca_certificate_the_chain_check_can_use_is_a_usable_anchor(make_key, extensions):
    key = make_key()
    root = certificate(key, extensions)
    assert chain_verifies(key, root)
    assert verifier.load_trust_anchor("manufacturer_ca", pem(root), valid_at=NOW) == root


@pytest.mark.parametrize(("make_key", "extensions", "reason"), UNUSABLE.values(), ids=UNUSABLE.keys())
def test_a_certificate_the_chain_check_cannot_use_is_refused_saying_why(make_key, extensions, reason):
    key = make_key()
    root = certificate(key, extensions)
    assert not chain_verifies(key, root)
    with pytest.raises(verifier.UnusableAnchor, match=r"^trust anchor gpu_vendor_root is unusable: ") as refused:
        verifier.load_trust_anchor("gpu_vendor_root", pem(root))
    assert reason in str(refused.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no PEM certificate"),
        ("not a certificate", "not a PEM certificate"),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "not a PEM certificate"),
        (None, "no PEM certificate"),
    ],
)
def test_text_that_is_no_certificate_is_refused(text, reason):
    with pytest.raises(verifier.UnusableAnchor, match=reason):
        verifier.load_trust_anchor("manufacturer_ca", text)


def test_two_certificates_are_not_one_anchor():
    both = pem(certificate(p256())) + pem(certificate(p256()))
    with pytest.raises(verifier.UnusableAnchor, match="2 certificates"):
        verifier.load_trust_anchor("manufacturer_ca", both)


def test_an_anchor_is_saved_only_while_it_is_valid():
    expired = pem(certificate(p256(), valid=(NOW - datetime.timedelta(days=10), NOW - datetime.timedelta(days=1))))
    with pytest.raises(verifier.UnusableAnchor, match="not at"):
        verifier.load_trust_anchor("manufacturer_ca", expired, valid_at=NOW)
    assert verifier.load_trust_anchor("manufacturer_ca", expired)  # what is in use is judged by the chain check


# -- the admin and the import ----------------------------------------------------------------


def test_the_admin_refuses_a_malformed_trust_anchor(admin_client, db):
    answer = admin_client.post(ADD, {"role": "manufacturer_ca", "pem": "-----BEGIN CERTIFICATE-----\nnope"})
    assert answer.status_code == 200
    assert (
        "trust anchor manufacturer_ca is unusable: not a PEM certificate"
        in answer.context["adminform"].form.errors["pem"][0]
    )
    assert not TrustAnchor.objects.exists()


def test_the_admin_refuses_to_replace_an_anchor_with_a_certificate_that_is_not_a_ca(admin_client, imported):
    anchor = TrustAnchor.objects.get(role="gpu_vendor_root")
    leaf = pem(certificate(p256(), ((x509.BasicConstraints(ca=False, path_length=None), True),), subject="a GPU"))
    answer = admin_client.post(
        f"/admin/attestation/trustanchor/{anchor.pk}/change/", {"role": anchor.role, "pem": leaf}
    )
    assert answer.status_code == 200
    assert "CN=a GPU is not a CA certificate" in answer.context["adminform"].form.errors["pem"][0]
    anchor.refresh_from_db()
    assert anchor.pem == imported["gpu_vendor_root"]


def test_the_admin_saves_a_usable_anchor(admin_client, db, bmcsim_roots):
    answer = admin_client.post(ADD, {"role": "manufacturer_ca", "pem": bmcsim_roots["manufacturer_ca"]})
    assert answer.status_code == 302
    assert TrustAnchor.objects.get(role="manufacturer_ca").pem == bmcsim_roots["manufacturer_ca"].strip()


def test_the_import_refuses_an_unusable_anchor_and_changes_no_row(imported, tmp_path):
    source = tmp_path / "roots.json"
    source.write_text(json.dumps({**imported, "manufacturer_ca": pem(certificate(p256(), ((usage(ca=True), True),)))}))
    with pytest.raises(CommandError, match=r"trust anchor manufacturer_ca is unusable: .* is not a CA certificate"):
        call_command("import_trust_anchors", str(source))
    assert dict(TrustAnchor.objects.values_list("role", "pem")) == imported


# -- an unusable anchor already in the database ------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        pytest.param("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", id="malformed PEM"),
        pytest.param(pem(certificate(p256(), ((usage(ca=True), True),))), id="a certificate that is no CA"),
    ],
)
def test_an_unusable_anchor_in_the_database_counts_as_not_configured_and_says_why(imported, written):
    TrustAnchor.objects.filter(role="manufacturer_ca").update(pem=written)  # around the model's checks
    with pytest.raises(services.NotConfigured, match=r"^trust anchor manufacturer_ca is unusable: "):
        services.trusted_roots()
    TrustAnchor.objects.filter(role="manufacturer_ca").update(pem=imported["manufacturer_ca"])
    assert (
        services.trusted_roots().manufacturer_ca.subject.rfc4514_string() == "CN=bmcsim Manufacturer Root CA,O=bmcsim"
    )


def test_every_unusable_anchor_is_named_not_only_the_first(imported):
    TrustAnchor.objects.update(pem="garbage")
    with pytest.raises(services.NotConfigured) as refused:
        services.trusted_roots()
    assert "trust anchor manufacturer_ca is unusable" in str(refused.value)
    assert "trust anchor gpu_vendor_root is unusable" in str(refused.value)
