"""Each GPU's SPDM evidence in band, in the agent's evidence under `gpu_spdm` as the host backend
reads it over NVML: verified by our SPDM verifier against `nvidia_device_root` of
/bmcsim/v1/roots, the same responder's answer as out of band, so the SPDM faults break it alike."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

import pytest

from attestation.verifier import load_trust_anchor
from attestation.verifier.spdm import SPDMEvidence, read_spdm_evidence, verify_spdm_evidence
from tests.bmcsim.test_component_integrity import TAMPERED_INDEX, evidence_of

NODE, GPU = "node-002", 3  # the GPU test_component_integrity asks out of band


def in_band(bmcsim, nonce: bytes) -> list[dict]:
    answer = bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": nonce.hex()})
    assert answer.status_code == 200, answer.text
    return answer.json()["gpu_spdm"]


def read(entry: dict) -> SPDMEvidence:
    return read_spdm_evidence(base64.b64decode(entry["report"]), entry["cert_chain"])


def failures(bmcsim, evidence: SPDMEvidence, nonce: bytes) -> set[tuple[str, str]]:
    root = load_trust_anchor("nvidia_device_root", bmcsim.get("/bmcsim/v1/roots").json()["nvidia_device_root"])
    return {(f.code, f.component) for f in verify_spdm_evidence(evidence, nonce=nonce, root=root, at=datetime.now(UTC))}


def test_every_gpu_reports_in_band_as_the_host_backend_does_and_verifies(bmcsim):
    nonce = secrets.token_bytes(32)
    entries = in_band(bmcsim, nonce)
    gpus = next(n for n in bmcsim.get("/bmcsim/v1/inventory").json()["nodes"] if n["name"] == NODE)["gpus"]
    assert [(e["index"], e["uuid"]) for e in entries] == [(g["index"], g["uuid"]) for g in gpus]
    for entry in entries:
        assert set(entry) == {"index", "uuid", "source", "report", "cert_chain"} and entry["source"] == "in_band"
        evidence = read(entry)
        assert failures(bmcsim, evidence, nonce) == set(), entry["index"]
        assert (evidence.slot, evidence.requested_index, sorted(evidence.measurements)) == (0, 0xFF, [*range(1, 65)])
        assert len(evidence.chain) == 2  # leaf, provisioner CA
    # The GPU's own responder answers either way: the same measurements and chain as out of band.
    out_of_band = evidence_of(bmcsim, nonce)
    assert read(entries[GPU]).measurements == out_of_band.measurements
    assert read(entries[GPU]).chain == out_of_band.chain


@pytest.mark.parametrize(
    ("kind", "broken"),
    [
        ("gpu_measurement_tamper", set()),  # still signed: the RIMs catch it (test_gpu_rims_served)
        ("gpu_wrong_nonce", {("gpu_nonce", "gpu")}),
        ("gpu_broken_chain", {("gpu_chain", "gpu")}),
    ],
)
def test_an_spdm_fault_breaks_the_in_band_report_as_the_out_of_band_one(bmcsim, kind, broken):
    nonce = secrets.token_bytes(32)
    before = read(in_band(bmcsim, nonce)[GPU])
    assert bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": kind, "gpu": GPU}).status_code == 201
    entries = in_band(bmcsim, nonce)
    after = read(entries[GPU])
    assert failures(bmcsim, after, nonce) == broken == failures(bmcsim, evidence_of(bmcsim, nonce), nonce)
    changed = {i for i in before.measurements if before.measurements[i] != after.measurements[i]}
    assert changed == ({TAMPERED_INDEX} if kind == "gpu_measurement_tamper" else set())
    for other in (e for e in entries if e["index"] != GPU):
        assert failures(bmcsim, read(other), nonce) == set(), other["index"]


def test_a_gpu_is_unavailable_as_nvml_has_it_for_a_nonce_off_32_bytes_or_with_cc_off(bmcsim):
    for entry in in_band(bmcsim, secrets.token_bytes(16)):
        assert entry == {**_which(entry), "status": "unavailable", "reason": "nonce_not_32_bytes"}
    fault = {"node": NODE, "kind": "cc_mode", "mode": "off"}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    for entry in in_band(bmcsim, secrets.token_bytes(32)):
        assert entry == {**_which(entry), "status": "unavailable", "reason": "confidential_computing_off"}


def _which(entry: dict) -> dict:
    return {"index": entry["index"], "uuid": entry["uuid"]}
