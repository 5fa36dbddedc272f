"""NVIDIA's own captured SPDM evidence (tests/data/nvidia, its README says whence) through our SPDM
reader and verifier: the real reports verify against NVIDIA's real Device Identity CA, and each
way of breaking them fails with its own reason, never with an exception."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.verifier import load_trust_anchor
from attestation.verifier.fields import MAX_SPDM_CHAIN_CERTS, MAX_SPDM_REPORT_BYTES
from attestation.verifier.spdm import HOPPER_FWID_EXTENSION, SPDMEvidence, read_spdm_evidence, verify_spdm_evidence
from core import validation
from tests.support.examples import examples

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia"
AT = datetime(2026, 1, 1, tzinfo=UTC)  # inside every vendored chain's validity (2022-03-01 to 9999)
ROOT = load_trust_anchor("gpu_vendor_root", (DATA / "nvidia_device_identity_ca.pem").read_text())

# NVIDIA's pairs, with the nonce its own tests give each (nv-attestation-sdk-cpp/unit-tests/test_utils.cpp).
HOPPER_535_NONCE = "27a328247bf7935c993341cf587be6f05986ccce4fe7ba2c54100bd616a58f66"
SDK_NONCE = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"
SINGLE = {
    "hopper": ("hopperAttestationReport.txt", "hopperCertChain.txt", HOPPER_535_NONCE),
    "blackwell": ("blackwellAttestationReport.txt", "blackwellCertChain.txt", SDK_NONCE),
    # NVIDIA's "expired driver RIM" case: what expired is the RIM of its driver, not this evidence.
    "hopper_570": ("hopperAttestationReportExpired.txt", "hopperCertChainExpired.txt", SDK_NONCE),
}


def single(name: str) -> tuple[bytes, str, bytes]:
    report, chain, nonce = SINGLE[name]
    return bytes.fromhex((DATA / report).read_text().strip()), (DATA / chain).read_text(), bytes.fromhex(nonce)


def multi_gpu() -> list[tuple[bytes, str, bytes]]:
    gpus = json.loads((DATA / "multi_gpu_hopper.json").read_text())
    return [
        (base64.b64decode(gpu["evidence"]), base64.b64decode(gpu["certificate"]).decode(), bytes.fromhex(gpu["nonce"]))
        for gpu in gpus
    ]


CAPTURED = {
    **{name: single(name) for name in SINGLE},
    **{f"multi_gpu_hopper[{i}]": e for i, e in enumerate(multi_gpu())},
}


def failures_of(report: bytes, chain: str, nonce: bytes, *, root: x509.Certificate = ROOT, at: datetime = AT) -> set:
    evidence = read_spdm_evidence(report, chain)
    return {(f.code, f.component) for f in verify_spdm_evidence(evidence, nonce=nonce, root=root, at=at)}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_nvidias_captured_evidence_verifies_against_its_device_identity_ca(name):
    assert failures_of(*CAPTURED[name]) == set()


WHAT_THEY_SAY = {  # driver, VBIOS, whether the opaque data carries an FWID
    "hopper": ("535.86.09", "96.00.5E.00.01", False),
    "blackwell": ("575.32", "97.00.88.00.0F", True),
    "hopper_570": ("570.124.03", "96.00.5E.00.04", True),
    **{f"multi_gpu_hopper[{i}]": ("590.12", "96.00.A5.00.01", True) for i in range(4)},
}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_the_reports_say_their_driver_vbios_and_64_sha384_measurements(name):
    report, chain, nonce = CAPTURED[name]
    evidence = read_spdm_evidence(report, chain)
    assert (evidence.driver_version, evidence.vbios_version, "fwid" in evidence.opaque) == WHAT_THEY_SAY[name]
    assert (evidence.nonce, evidence.slot, evidence.requested_index) == (nonce, 0, 0xFF)
    assert sorted(evidence.measurements) == list(range(1, 65))
    assert {(block.dmtf_type, len(block.value)) for block in evidence.measurements.values()} == {(1, 48)}
    assert len(evidence.chain) == 5 and evidence.chain[-1] == ROOT


def test_nvidias_invalid_signature_fixture_fails_its_signature_and_its_fwid():
    # Another GPU's report (driver 560.00) with hopperCertChainExpired's chain: its FWID is not the leaf's either.
    report = bytes.fromhex((DATA / "hopperAttestationReportInvalidSignature.txt").read_text().strip())
    chain, nonce = single("hopper_570")[1:]
    assert failures_of(report, chain, nonce) == {("gpu_signature", "gpu"), ("gpu_chain", "gpu.fwid")}


def test_a_flipped_byte_in_a_measurement_fails_the_signature():
    report, chain, nonce = CAPTURED["blackwell"]
    offset = report.index(read_spdm_evidence(report, chain).measurements[5].value)
    tampered = report[:offset] + bytes([report[offset] ^ 0x01]) + report[offset + 1 :]
    assert read_spdm_evidence(tampered, chain).measurements[5].value[0] == report[offset] ^ 0x01
    assert failures_of(tampered, chain, nonce) == {("gpu_signature", "gpu")}


def test_another_nonce_fails_the_nonce_alone():
    report, chain, _ = CAPTURED["hopper"]
    assert failures_of(report, chain, bytes(32)) == {("gpu_nonce", "gpu")}


def test_a_chain_to_another_root_fails_the_chain_alone():
    key = ec.generate_private_key(ec.SECP384R1())
    other_root = certificate("Another GPU vendor", key, key.public_key(), ca=True, issuer="Another GPU vendor")
    evidence = read_spdm_evidence(*CAPTURED["hopper"][:2])
    root = load_trust_anchor("gpu_vendor_root", pem(other_root))
    [failure] = verify_spdm_evidence(evidence, nonce=evidence.nonce, root=root, at=AT)
    assert (failure.code, failure.component) == ("gpu_chain", "gpu")
    assert failure.found.startswith("a chain ending at O=NVIDIA,CN=NVIDIA Device Identity CA: ")


@pytest.mark.parametrize("signature", [bytes(96), b"\xff" * 96], ids=["zeros", "ones"])
def test_a_signature_out_of_range_fails_the_signature(signature):
    report, chain, nonce = CAPTURED["hopper"]
    assert failures_of(report[:-96] + signature, chain, nonce) == {("gpu_signature", "gpu")}


def test_a_chain_not_yet_valid_fails_with_its_validity():
    evidence = read_spdm_evidence(*CAPTURED["hopper"][:2])
    before = datetime(2022, 2, 1, tzinfo=UTC)  # before the GH100 Provisioner ICA's notBefore (2022-03-01)
    [failure] = verify_spdm_evidence(evidence, nonce=evidence.nonce, root=ROOT, at=before)
    assert (failure.code, failure.component) == ("gpu_chain", "gpu")
    assert failure.found.startswith(f"a certificate not valid at {before.isoformat()}")


# A chain of our own, so that the report can be signed again: NVIDIA's report with a leaf we issue.


def certificate(subject, key, public_key, *, ca, issuer, not_after=AT + timedelta(days=1), extensions=()):
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(AT - timedelta(days=1))
        .not_valid_after(not_after)
        .add_extension(x509.KeyUsage(not ca, False, False, False, False, ca, ca, False, False), critical=True)
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(key, hashes.SHA384())


def pem(*certificates):
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)


def signed_again(fwid_extensions=None, not_after=AT + timedelta(days=1)):
    """A multi-GPU Hopper report signed again by a leaf of our own CA; the leaf's FWID extension is
    NVIDIA's own leaf's unless `fwid_extensions` says otherwise."""
    report, chain, nonce = CAPTURED["multi_gpu_hopper[0]"]
    nvidia_leaf = read_spdm_evidence(report, chain).chain[0]
    if fwid_extensions is None:
        fwid_extensions = [nvidia_leaf.extensions.get_extension_for_oid(HOPPER_FWID_EXTENSION).value]
    root_key, leaf_key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    root = certificate("Test GPU root", root_key, root_key.public_key(), ca=True, issuer="Test GPU root")
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key())
    leaf = certificate(
        "Test GPU", root_key, leaf_key.public_key(), ca=False, issuer="Test GPU root", not_after=not_after,
        extensions=[authority, *fwid_extensions],
    )  # fmt: skip
    signed = read_spdm_evidence(report, chain).signed
    r, s = decode_dss_signature(leaf_key.sign(signed, ec.ECDSA(hashes.SHA384())))
    resigned = signed + r.to_bytes(48, "big") + s.to_bytes(48, "big")
    return resigned, pem(leaf, root), nonce, load_trust_anchor("gpu_vendor_root", pem(root))


def test_a_report_signed_again_by_a_leaf_of_the_same_fwid_verifies():
    report, chain, nonce, root = signed_again()
    assert failures_of(report, chain, nonce, root=root) == set()


def test_a_leaf_issued_for_another_fwid_fails_the_fwid_alone():
    nvidia_leaf = read_spdm_evidence(*CAPTURED["multi_gpu_hopper[0]"][:2]).chain[0]
    extension = nvidia_leaf.extensions.get_extension_for_oid(HOPPER_FWID_EXTENSION).value
    assert isinstance(extension, x509.UnrecognizedExtension)
    # NVIDIA's Hopper layout ends with the FWID's 48 bytes: another firmware's, all zeros.
    other = x509.UnrecognizedExtension(HOPPER_FWID_EXTENSION, extension.value[:-48] + bytes(48))
    report, chain, nonce, root = signed_again([other])
    evidence = read_spdm_evidence(report, chain)
    [failure] = verify_spdm_evidence(evidence, nonce=nonce, root=root, at=AT)
    assert (failure.code, failure.component, failure.found) == (
        "gpu_chain",
        "gpu.fwid",
        f"{bytes(48).hex()} in the leaf certificate",
    )


def test_a_leaf_without_an_fwid_extension_fails_the_fwid():
    report, chain, nonce, root = signed_again([])
    assert failures_of(report, chain, nonce, root=root) == {("gpu_chain", "gpu.fwid")}


def test_an_expired_leaf_fails_the_chain_alone():
    report, chain, nonce, root = signed_again(not_after=AT - timedelta(hours=1))
    assert failures_of(report, chain, nonce, root=root) == {("gpu_chain", "gpu")}


# Malformed evidence: validation.Invalid, naming where, which the appraisal makes a `malformed` failure.

HOPPER_REPORT, HOPPER_CHAIN, HOPPER_NONCE = CAPTURED["hopper"]
MALFORMED_REPORTS = {
    "empty": b"",
    "request only": HOPPER_REPORT[:37],
    "signature cut": HOPPER_REPORT[:-1],
    "a byte after the signature": HOPPER_REPORT + b"\0",
    "too big": HOPPER_REPORT + bytes(MAX_SPDM_REPORT_BYTES),
    "SPDM 1.0": b"\x10" + HOPPER_REPORT[1:],
    "a response of another code": HOPPER_REPORT[:38] + b"\x61" + HOPPER_REPORT[39:],
    "no measurement blocks": HOPPER_REPORT[:41] + b"\0" + HOPPER_REPORT[42:],
    "unsigned": HOPPER_REPORT[:2] + b"\0" + HOPPER_REPORT[3:],
    "garbage": b"\x11\xe0" * 100,
}
MALFORMED_CHAINS = {
    "empty": "",
    "not PEM": "a certificate",
    "trailing text": HOPPER_CHAIN + "and more",
    "too many": pem(read_spdm_evidence(HOPPER_REPORT, HOPPER_CHAIN).chain[0]) * (MAX_SPDM_CHAIN_CERTS + 1),
    "a broken certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "not text": None,
}


@pytest.mark.parametrize("name", sorted(MALFORMED_REPORTS))
def test_a_malformed_report_is_invalid_where_it_is(name):
    with pytest.raises(validation.Invalid) as invalid:
        read_spdm_evidence(MALFORMED_REPORTS[name], HOPPER_CHAIN)
    assert invalid.value.path == "gpu.report"


@pytest.mark.parametrize("name", sorted(MALFORMED_CHAINS))
def test_a_malformed_chain_is_invalid_where_it_is(name):
    with pytest.raises(validation.Invalid) as invalid:
        read_spdm_evidence(HOPPER_REPORT, MALFORMED_CHAINS[name])
    assert invalid.value.path.startswith("gpu.cert_chain")


def read_and_verify(report: bytes, nonce: bytes) -> SPDMEvidence | None:
    """The evidence, if it reads, with its failures checked: never anything raised but validation.Invalid."""
    try:
        evidence = read_spdm_evidence(report, HOPPER_CHAIN)
    except validation.Invalid:
        return None
    assert verify_spdm_evidence(evidence, nonce=nonce, root=ROOT, at=AT), "a changed report verified"
    return evidence


@settings(max_examples=examples(200), deadline=None)
@given(report=st.binary(max_size=5000))
def test_random_bytes_never_raise_and_never_verify(report):
    read_and_verify(report, bytes(32))


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_a_real_report_changed_anywhere_never_raises_and_never_verifies(data):
    report = bytearray(HOPPER_REPORT)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(report) - 1))
        report[position] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        del report[data.draw(st.integers(0, len(report) - 1)) :]
    if report != HOPPER_REPORT:  # two changes of one byte may undo each other
        read_and_verify(bytes(report), HOPPER_NONCE)
