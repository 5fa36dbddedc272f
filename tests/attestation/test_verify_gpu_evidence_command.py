"""manage.py verify_gpu_evidence on NVIDIA's own captured evidence and RIMs (tests/data/nvidia/ and
tests/data/nvidia_rims/, their READMEs say where each comes from).

NVIDIA publishes no validly signed driver RIM for its sample Hopper report's driver, 535.86.09, so
that report never passes: its VBIOS measurements match NVIDIA's VBIOS RIM, its driver's are
accounted for by no RIM, and an unaccounted measurement is a failure."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from cryptography import x509
from django.core.management import call_command

from attestation.gpu_rims_import import RimDocument, import_gpu_rims
from attestation.models import GpuRim, TrustAnchor
from attestation.verifier.gpu_rims import signing_chain

DATA = Path(__file__).resolve().parent.parent / "data"
EVIDENCE, RIMS = DATA / "nvidia", DATA / "nvidia_rims"
HOPPER_NONCE = "27a328247bf7935c993341cf587be6f05986ccce4fe7ba2c54100bd616a58f66"
SDK_NONCE = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"
VBIOS_FILE = "1010_0200_882_96005E0001_PROD.swidtag"
MISMATCH_FILE = "NV_GPU_VBIOS_1010_0200_882_96005E0001_measurement_mismatch.xml"
# Inside the device chains' validity (2022 to 9999) and both VBIOS RIMs' (2023-12-13 to 2025-06-22).
AT = "2024-06-01T00:00:00+00:00"


@pytest.fixture
def anchors(db):
    TrustAnchor.objects.create(role="nvidia_device_root", pem=(EVIDENCE / "nvidia_device_identity_ca.pem").read_text())
    TrustAnchor.objects.create(role="nvidia_rim_root", pem=(RIMS / "verifier_RIM_root.pem").read_text())


def rims_dir(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "rims"
    directory.mkdir()
    for name in names:
        shutil.copy(RIMS / name, directory / name)
    return directory


def verify(
    *options: str,
    report: Path = EVIDENCE / "hopperAttestationReport.txt",
    chain: str = "hopperCertChain.txt",
    nonce: str = HOPPER_NONCE,
) -> tuple[int, dict]:
    out = StringIO()
    arguments = ["--report", str(report), "--chain", str(EVIDENCE / chain), "--nonce", nonce, "--at", AT, *options]
    try:
        call_command("verify_gpu_evidence", *arguments, stdout=out)
    except SystemExit as exit:
        return int(exit.code or 0), json.loads(out.getvalue())
    return 0, json.loads(out.getvalue())


def no_driver_rim() -> str:
    at = datetime.fromisoformat(AT).isoformat()
    return f"gpu_rim gpu.driver: expected one driver RIM for 535.86.09, NVIDIA's, valid at {at}, found none imported"


def test_hoppers_vbios_matches_its_rim_and_the_missing_driver_rim_fails_alone(anchors, tmp_path):
    code, result = verify("--rims", str(rims_dir(tmp_path, VBIOS_FILE)), "--no-revocation")
    assert code == 1
    assert result["failures"] == [no_driver_rim()]
    assert (result["driver_version"], result["vbios_version"]) == ("535.86.09", "96.00.5E.00.01")
    assert result["rims"] == {"vbios": VBIOS_FILE}


def test_without_revocation_answers_the_evidence_fails_for_want_of_them(anchors, tmp_path):
    code, result = verify("--rims", str(rims_dir(tmp_path, VBIOS_FILE)))
    assert code == 1
    [missing_driver, *revocation] = result["failures"]
    assert missing_driver == no_driver_rim()
    # One for each certificate of the device chain but the firmware's leaf and NVIDIA's root
    # (tests/attestation/test_ocsp.py), then one for each of the VBIOS RIM's signing chain but
    # NVIDIA's RIM root, its signer included.
    device, rim = revocation[:3], revocation[3:]
    assert all(
        failure.startswith(
            "gpu_revocation gpu: expected certificates known unrevoked (OCSP), found revocation: no OCSP"
        )
        for failure in device
    )
    rim_root = x509.load_pem_x509_certificate((RIMS / "verifier_RIM_root.pem").read_bytes())
    assert len(rim) == len([c for c in signing_chain((RIMS / VBIOS_FILE).read_bytes()) if c != rim_root]) >= 1
    assert all(
        failure.startswith(f"gpu_revocation gpu.vbios: expected certificates known unrevoked (OCSP): RIM {VBIOS_FILE},")
        and ", found revocation: no OCSP answer for " in failure
        for failure in rim
    )


def test_a_vbios_rim_with_another_golden_value_fails_that_index(anchors, tmp_path):
    code, result = verify("--rims", str(rims_dir(tmp_path, MISMATCH_FILE)), "--no-revocation")
    assert code == 1
    [missing_driver, mismatch] = result["failures"]
    assert missing_driver == no_driver_rim()
    assert mismatch.startswith(
        f"gpu_measurement gpu.vbios: expected the measurements of vbios RIM {MISMATCH_FILE}, found index 9: measured "
    )


def test_two_rims_of_one_release_are_refused_rather_than_chosen_between(anchors, tmp_path):
    code, result = verify("--rims", str(rims_dir(tmp_path, VBIOS_FILE, MISMATCH_FILE)), "--no-revocation")
    assert code == 1
    assert result["failures"][1].startswith("gpu_rim gpu.vbios: expected one vbios RIM for 96.00.5E.00.01")
    assert f"found 2: {VBIOS_FILE}, {MISMATCH_FILE}" in result["failures"][1]


def test_a_rim_expired_at_the_evidences_time_fails_its_validity(anchors, tmp_path):
    code, result = verify(
        "--rims", str(rims_dir(tmp_path, VBIOS_FILE)), "--no-revocation", "--at", "2026-01-01T00:00:00+00:00"
    )
    assert code == 1
    assert result["failures"][1].startswith("gpu_rim gpu.vbios: expected one vbios RIM for 96.00.5E.00.01")
    assert f"found RIM {VBIOS_FILE}: validity: " in result["failures"][1]


def test_nvidias_invalid_signature_fixture_fails_naming_the_signature(anchors, tmp_path):
    code, result = verify(
        "--rims",
        str(rims_dir(tmp_path, VBIOS_FILE)),
        "--no-revocation",
        report=EVIDENCE / "hopperAttestationReportInvalidSignature.txt",
        chain="hopperCertChainExpired.txt",
        nonce=SDK_NONCE,
    )
    assert code == 1
    assert any(failure.startswith("gpu_signature gpu:") for failure in result["failures"])


def test_a_binary_report_and_a_root_file_do_as_well(db, tmp_path):
    TrustAnchor.objects.create(role="nvidia_rim_root", pem=(RIMS / "verifier_RIM_root.pem").read_text())
    binary = tmp_path / "report.bin"
    binary.write_bytes(bytes.fromhex((EVIDENCE / "hopperAttestationReport.txt").read_text()))
    code, result = verify(
        "--rims",
        str(rims_dir(tmp_path, VBIOS_FILE)),
        "--no-revocation",
        "--root",
        str(EVIDENCE / "nvidia_device_identity_ca.pem"),
        report=binary,
    )
    assert (code, result["failures"]) == (1, [no_driver_rim()])


def test_the_imported_rims_are_compared_and_a_retired_one_fails(anchors):
    import_gpu_rims([RimDocument(VBIOS_FILE, (RIMS / VBIOS_FILE).read_bytes())], at=datetime(2024, 6, 1, tzinfo=UTC))
    assert verify("--no-revocation")[1]["failures"] == [no_driver_rim()]
    GpuRim.objects.update(retired_at=datetime(2024, 6, 2, tzinfo=UTC))
    code, result = verify("--no-revocation")
    assert code == 1
    assert result["failures"][1] == (
        "release_retired gpu.vbios: expected a release not retired, found vbios 96.00.5E.00.01 (retired)"
    )
