"""Each GPU's SPDM identity out of band: Redfish ComponentIntegrity, its signed measurements in
NVIDIA's layout, verified by our own SPDM verifier against bmcsim's device identity CA, and the
faults that each break one thing."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

import pytest

from attestation.verifier import load_trust_anchor
from attestation.verifier.spdm import read_spdm_evidence, verify_spdm_evidence
from core.topology import bmc_password

MEMBER = "/redfish/v1/ComponentIntegrity/node-002-GPU3"
ACTION = f"{MEMBER}/Actions/ComponentIntegrity.SPDMGetSignedMeasurements"
TAMPERED_INDEX = 10  # NVIDIA's VBIOS "measurement mismatch" index, a block's


def evidence_of(bmcsim, nonce: bytes, **parameters):
    answer = bmcsim.post(ACTION, json={"Nonce": nonce.hex(), "SlotId": 0, **parameters})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["Version"], body["HashingAlgorithm"], body["SigningAlgorithm"]) == (
        "1.1",
        "TPM_ALG_SHA_384",
        "TPM_ALG_ECDSA_ECC_NIST_P384",
    )
    chain = bmcsim.get(body["Certificate"]["@odata.id"]).json()["CertificateString"]
    return read_spdm_evidence(base64.b64decode(body["SignedMeasurements"]), chain)


def failures(bmcsim, evidence, nonce: bytes) -> set:
    root = load_trust_anchor("nvidia_device_root", bmcsim.get("/bmcsim/v1/roots").json()["nvidia_device_root"])
    found = verify_spdm_evidence(evidence, nonce=nonce, root=root, at=datetime.now(UTC))
    return {(f.code, f.component) for f in found}


def test_every_gpu_has_an_spdm_member_targeting_its_processor(bmcsim):
    members = [m["@odata.id"] for m in bmcsim.get("/redfish/v1/ComponentIntegrity").json()["Members"]]
    assert MEMBER in members and len(members) == 8 * len(bmcsim.get("/bmcsim/v1/inventory").json()["nodes"])
    body = bmcsim.get(MEMBER).json()
    assert body["ComponentIntegrityType"] == "SPDM" and body["ComponentIntegrityEnabled"] is True
    assert body["TargetComponentURI"] == "/redfish/v1/Systems/node-002/Processors/GPU3"
    certificate = body["SPDM"]["IdentityAuthentication"]["ResponderAuthentication"]["ComponentCertificate"]
    assert certificate["@odata.id"] == "/redfish/v1/Systems/node-002/Processors/GPU3/Certificates/CertChain"
    assert body["Actions"]["#ComponentIntegrity.SPDMGetSignedMeasurements"]["target"] == ACTION
    processor = bmcsim.get("/redfish/v1/Systems/node-002/Processors/GPU3").json()
    assert bmcsim.get(processor["Certificates"]["@odata.id"]).json()["Members"] == [certificate]


def test_a_bmc_credential_reaches_its_own_gpus_only(bmcsim):
    own = ("admin", bmc_password("node-002"))
    members = [m["@odata.id"] for m in bmcsim.get("/redfish/v1/ComponentIntegrity", auth=own).json()["Members"]]
    assert members == [f"/redfish/v1/ComponentIntegrity/node-002-GPU{i}" for i in range(8)]
    assert bmcsim.get("/redfish/v1/ComponentIntegrity/node-001-GPU0", auth=own).status_code == 403


def test_the_signed_measurements_verify_against_the_device_identity_ca(bmcsim):
    nonce = secrets.token_bytes(32)
    evidence = evidence_of(bmcsim, nonce)
    assert failures(bmcsim, evidence, nonce) == set()
    assert sorted(evidence.measurements) == list(range(1, 65))
    inventory = bmcsim.get("/redfish/v1/UpdateService/FirmwareInventory/node-002-GPU3-VBIOS").json()
    assert evidence.vbios_version == inventory["Version"].upper()
    assert evidence.driver_version == "560.35.03"  # the factory driver, as the in-band report measures
    # Stable: another nonce, the same measurements.
    again = evidence_of(bmcsim, secrets.token_bytes(32))
    assert again.measurements == evidence.measurements
    one = evidence_of(bmcsim, nonce, MeasurementIndices=[TAMPERED_INDEX])
    assert dict(one.measurements) == {TAMPERED_INDEX: evidence.measurements[TAMPERED_INDEX]}
    assert failures(bmcsim, one, nonce) == set()


@pytest.mark.parametrize(
    "parameters",
    [{"Nonce": "00"}, {"SlotId": 1}, {"MeasurementIndices": [1, 2]}, {"MeasurementIndices": [65]}],
)
def test_parameters_off_the_schema_are_refused(bmcsim, parameters):
    answer = bmcsim.post(ACTION, json={"Nonce": "00" * 32, **parameters})
    assert answer.status_code == 400
    assert answer.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("ActionParameterValueError")


def test_a_tampered_measurement_is_signed_and_differs_at_the_vbios_index_alone(bmcsim):
    nonce = secrets.token_bytes(32)
    before = evidence_of(bmcsim, nonce)
    fault = {"node": "node-002", "kind": "gpu_measurement_tamper", "gpu": 3}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    after = evidence_of(bmcsim, nonce)
    assert failures(bmcsim, after, nonce) == set()
    changed = {i for i in before.measurements if before.measurements[i] != after.measurements[i]}
    assert changed == {TAMPERED_INDEX}
    bmcsim.reset("node-002", "PowerCycle")  # a VBIOS change outlives a power cycle
    assert evidence_of(bmcsim, nonce).measurements == after.measurements


def test_a_wrong_nonce_fails_the_nonce_alone(bmcsim):
    fault = {"node": "node-002", "kind": "gpu_wrong_nonce", "gpu": 3}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    nonce = secrets.token_bytes(32)
    assert failures(bmcsim, evidence_of(bmcsim, nonce), nonce) == {("gpu_nonce", "gpu")}


def test_a_broken_chain_fails_the_chain_alone(bmcsim):
    fault = {"node": "node-002", "kind": "gpu_broken_chain", "gpu": 3}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    nonce = secrets.token_bytes(32)
    assert failures(bmcsim, evidence_of(bmcsim, nonce), nonce) == {("gpu_chain", "gpu")}
    other = bmcsim.post(ACTION.replace("GPU3", "GPU2"), json={"Nonce": nonce.hex()}).json()
    assert base64.b64decode(other["SignedMeasurements"])
