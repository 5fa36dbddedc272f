"""NVIDIA's reference integrity manifests: NVIDIA's own RIMs read and verified against NVIDIA's RIM
root (tests/data/nvidia_rims/README.md says where each comes from), NVIDIA's negative fixtures
each failing for its own reason, and the VBIOS RIM's golden values matched against the
measurements of NVIDIA's sample Hopper report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.verifier.fields import MAX_RIM_BYTES
from attestation.verifier.gpu_rims import DRIVER, VBIOS, GoldenMeasurement, compare_measurements, read_rim, verify_rim
from attestation.verifier.spdm import read_spdm_evidence
from core import validation

DATA = Path(__file__).resolve().parent.parent / "data"
RIMS = DATA / "nvidia_rims"
ROOT = x509.load_pem_x509_certificate((RIMS / "verifier_RIM_root.pem").read_bytes())
VBIOS_RIM = (RIMS / "1010_0200_882_96005E0001_PROD.swidtag").read_bytes()
DRIVER_RIM = (RIMS / "NV_GPU_DRIVER_GH100_550.144.03.xml").read_bytes()
# Inside the VBIOS RIM's validity (its signing certificate: 2023-06-23 to 2025-06-22).
VBIOS_TIME = datetime(2024, 1, 1, tzinfo=UTC)
# Inside the driver RIMs' (2024-12-30 to 2026-12-30), after the expired one's (2025-01-01 to 2025-01-02).
DRIVER_TIME = datetime(2025, 6, 1, tzinfo=UTC)


def categories(failures: list[str]) -> list[str]:
    return [failure.split(":", 1)[0] for failure in failures]


def hopper_measurements() -> dict[int, bytes]:
    """NVIDIA's sample Hopper report's measurements, by RIM index: an SPDM block's index less one."""
    report = bytes.fromhex((DATA / "nvidia" / "hopperAttestationReport.txt").read_text().strip())
    evidence = read_spdm_evidence(report, (DATA / "nvidia" / "hopperCertChain.txt").read_text())
    assert (evidence.driver_version, evidence.vbios_version) == ("535.86.09", "96.00.5E.00.01")
    return {index - 1: block.value for index, block in evidence.measurements.items()}


def test_nvidias_vbios_rim_names_its_release_chip_validity_and_golden_measurements():
    rim = read_rim(VBIOS_RIM)
    assert (rim.component, rim.version, rim.chip) == (VBIOS, "96.00.5e.00.01", "GH100")
    assert (rim.valid_from.date().isoformat(), rim.valid_until.date().isoformat()) == ("2023-06-23", "2025-06-22")
    assert sorted(index for index, golden in rim.golden.items() if golden.active) == [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        8,
        9,
        10,
        11,
        12,
    ]
    assert len(rim.golden) == 64
    assert len(rim.golden[12].alternatives) == 4
    assert rim.golden[1].alternatives == (
        "c3f65ef79a19c029868cd7ce54b10e44f192444edb3506dde29cef2aac4e916c90a4f438e55aa7581a9e384c74d82db6",
    )


def test_nvidias_driver_rim_names_its_driver_release():
    rim = read_rim(DRIVER_RIM)
    assert (rim.component, rim.version, rim.chip) == (DRIVER, "550.144.03", "GH100")
    assert min(index for index, golden in rim.golden.items() if golden.active) == 7


@pytest.mark.parametrize(("rim", "at"), [(VBIOS_RIM, VBIOS_TIME), (DRIVER_RIM, DRIVER_TIME)], ids=["vbios", "driver"])
def test_nvidias_rims_verify_against_nvidias_rim_root_inside_their_validity(rim, at):
    assert verify_rim(rim, root=ROOT, at=at) == []


def test_the_vbios_rim_matches_the_measurements_of_nvidias_sample_hopper_report():
    assert compare_measurements(read_rim(VBIOS_RIM).golden, hopper_measurements()) == []


def test_nvidias_mismatching_vbios_rim_is_signed_and_differs_at_index_9_alone():
    rim = (RIMS / "NV_GPU_VBIOS_1010_0200_882_96005E0001_measurement_mismatch.xml").read_bytes()
    assert verify_rim(rim, root=ROOT, at=VBIOS_TIME) == []
    assert categories(compare_measurements(read_rim(rim).golden, hopper_measurements())) == ["index 9"]


@pytest.mark.parametrize(
    ("fixture", "reasons"),
    [
        ("incorrect_signature_driver_rim.xml", ["signature: does not verify with the signing certificate's key"]),
        (
            "NV_GPU_DRIVER_GH100_535.86.09_measurement_mismatch.xml",
            ["signature: the RIM was changed after it was signed (the digest of its content differs)"],
        ),
        (
            "incorrect_cert_chain_driver_rim.xml",
            [
                "chain: CN=HCC RIM L4 Signer,O=NVIDIA Corporation,L=Santa Clara,ST=CA,C=US is not issued by"
                " C=US,O=NVIDIA Corporation,CN=NVIDIA CoRIM L1 Root CA Debug Only: it does not chain to the RIM root"
            ],
        ),
    ],
)
def test_nvidias_negative_rims_each_fail_for_their_own_reason(fixture, reasons):
    assert verify_rim((RIMS / fixture).read_bytes(), root=ROOT, at=DRIVER_TIME) == reasons


def test_nvidias_expired_driver_rim_fails_its_validity():
    failures = verify_rim((RIMS / "NV_GPU_DRIVER_GH100_570.124.03_expired.xml").read_bytes(), root=ROOT, at=DRIVER_TIME)
    # NVIDIA edited it after signing as well (its own test turns RIM signatures off).
    assert categories(failures) == ["validity", "signature"]
    assert failures[0].startswith("validity: CN=RIM L4 Signer,") and "to 2025-01-02T" in failures[0]


def test_one_byte_changed_in_a_golden_hash_fails_the_signature():
    tampered = VBIOS_RIM.replace(b'Hash1="758af960', b'Hash1="858af960', 1)
    assert tampered != VBIOS_RIM
    assert read_rim(tampered).golden[12].alternatives[1].startswith("858af960")  # read, but not to be trusted
    assert categories(verify_rim(tampered, root=ROOT, at=VBIOS_TIME)) == ["signature"]


def test_a_rim_signed_with_another_algorithm_than_nvidias_is_refused():
    rim = VBIOS_RIM.replace(b"xmldsig-more#ecdsa-sha384", b"xmldsig-more#ecdsa-sha256", 1)
    assert verify_rim(rim, root=ROOT, at=VBIOS_TIME) == [
        "malformed: rim.Signature: InvalidInput: Signature method ECDSA_SHA256 forbidden by configuration"
    ]


def test_a_rim_fails_outside_its_signing_certificates_validity():
    after = verify_rim(VBIOS_RIM, root=ROOT, at=datetime(2025, 6, 23, tzinfo=UTC))
    assert after == [
        "validity: CN=HCC RIM L4 Signer,O=NVIDIA Corporation,L=Santa Clara,ST=CA,C=US is valid from"
        " 2023-06-23T09:30:33+00:00 to 2025-06-22T09:30:33+00:00, not at 2025-06-23T00:00:00+00:00"
    ]
    assert set(categories(verify_rim(VBIOS_RIM, root=ROOT, at=datetime(2023, 1, 1, tzinfo=UTC)))) == {"validity"}


def test_a_chain_to_another_root_fails():
    # A root of the same name as NVIDIA's RIM root, with another key.
    key = ec.generate_private_key(ec.SECP384R1())
    impostor = (
        x509.CertificateBuilder()
        .subject_name(ROOT.subject)
        .issuer_name(ROOT.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(VBIOS_TIME - timedelta(days=1000))
        .not_valid_after(VBIOS_TIME + timedelta(days=1000))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA384())
    )
    nvidias_incorrect_root = x509.load_pem_x509_certificate((RIMS / "incorrect_rim_root.crt").read_bytes())
    for root in (impostor, nvidias_incorrect_root):
        failures = verify_rim(VBIOS_RIM, root=root, at=VBIOS_TIME)
        assert categories(failures) == ["chain"]
        assert failures[0].endswith("it does not chain to the RIM root")


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE SoftwareIdentity [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;"><!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">]>
<SoftwareIdentity xmlns="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" tagId="&h;"/>"""
# The real RIM, its colloquialVersion taken from a file the parser must never read.
EXTERNAL_ENTITY = b'<!DOCTYPE SoftwareIdentity [<!ENTITY v SYSTEM "file:///etc/hostname">]>\n' + VBIOS_RIM.replace(
    b'colloquialVersion="96.00.5E.00.01"', b'colloquialVersion="&v;"', 1
)
MALFORMED = {
    "empty": b"",
    "not XML": b"96.00.5E.00.01",
    "truncated": VBIOS_RIM[: len(VBIOS_RIM) // 2],
    "too big": VBIOS_RIM + b" " * MAX_RIM_BYTES,
    "not a SWID tag": b"<SoftwareIdentity/>",
    "XML bomb": BOMB,
    "external entity": EXTERNAL_ENTITY,
    "undeclared entity": VBIOS_RIM.replace(b'product="GH100"', b'product="&p;"', 1),
    "unsigned": VBIOS_RIM[: VBIOS_RIM.index(b"<ds:Signature")] + b"</SoftwareIdentity>",
    "partly signed": VBIOS_RIM.replace(b'<ds:Reference URI=""', b'<ds:Reference URI="#payload"', 1),
    "repeated index": VBIOS_RIM.replace(b'index="13"', b'index="12"', 1),
    "index out of range": VBIOS_RIM.replace(b'index="13"', b'index="9999"', 1),
    "active neither True nor False": VBIOS_RIM.replace(b'active="False"', b'active="maybe"', 1),
    "an alternative missing": VBIOS_RIM.replace(b'alternatives="1"', b'alternatives="2"', 1),
    "a short hash": VBIOS_RIM.replace(b'Hash0="c3f65ef7', b'Hash0="c3f6', 1),
    "a switch's RIM": VBIOS_RIM.replace(b'edition="GPU"', b'edition="SWITCH"', 1),
    "a version of neither kind": VBIOS_RIM.replace(b'"96.00.5E.00.01"', b'"latest"', 1),
    "a broken certificate": VBIOS_RIM.replace(b"<ds:X509Certificate>MII", b"<ds:X509Certificate>AII", 1),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_rims_fail_with_a_reason_and_raise_nothing(name):
    rim = MALFORMED[name]
    assert rim != VBIOS_RIM
    with pytest.raises(validation.Invalid):
        read_rim(rim)
    failures = verify_rim(rim, root=ROOT, at=VBIOS_TIME)
    assert categories(failures) == ["malformed"]


def test_a_dtd_is_refused_even_one_libxml2_would_take():
    # libxml2 stops the bomb (its entity amplification limit) and the external entity (in an
    # attribute) itself; a small internal entity it expands, so no DTD at all is taken.
    harmless = b'<!DOCTYPE SoftwareIdentity [<!ENTITY v "96.00.5E.00.01">]>\n' + VBIOS_RIM.replace(
        b'colloquialVersion="96.00.5E.00.01"', b'colloquialVersion="&v;"', 1
    )
    assert verify_rim(harmless, root=ROOT, at=VBIOS_TIME) == ["malformed: rim: must not declare a DTD"]


def test_compare_measurements_names_each_mismatched_and_missing_active_index():
    golden = {
        1: GoldenMeasurement(active=True, alternatives=("11" * 48,)),
        2: GoldenMeasurement(active=True, alternatives=("22" * 48, "23" * 48)),
        3: GoldenMeasurement(active=True, alternatives=("33" * 48,)),
        4: GoldenMeasurement(active=False, alternatives=("44" * 48,)),
    }
    measured = {1: bytes.fromhex("11" * 48), 2: bytes.fromhex("24" * 48), 4: bytes.fromhex("45" * 48)}
    failures = compare_measurements(golden, measured)
    assert categories(failures) == ["index 2", "index 3"]
    assert failures[0].startswith("index 2: measured 2424") and "expected 2222" in failures[0]
    assert failures[1] == "index 3: not measured"
    assert compare_measurements(golden, {**measured, 2: bytes.fromhex("23" * 48), 3: bytes.fromhex("33" * 48)}) == []
