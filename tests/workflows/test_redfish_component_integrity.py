"""RedfishClient.gpu_spdm_evidence: each GPU's SPDM evidence through its node's BMC (Redfish
ComponentIntegrity), against bmcsim, verified by our own SPDM verifier; against sushy-tools, which
has no ComponentIntegrity; and against a BMC that answers as NVIDIA's HGX ones do, with tasks."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

import pytest

from attestation.verifier import load_trust_anchor
from attestation.verifier.spdm import read_spdm_evidence, verify_spdm_evidence
from core.topology import bmc_password
from tests.support.bmcsim import OPERATOR, Bmcsim, start_bmcsim
from tests.workflows.test_redfish_client import servers, sushy_emulator  # noqa: F401 (fixtures)
from workflows.redfish import BMCAccess, RedfishClient

NODE = "node-001"
GPUS = 8
# The service root, the members with their certificate chains inline ($expand), the Processors
# with their UUIDs inline, then the action of each GPU.
CALLS = 3 + GPUS


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=2)
    yield sim
    sim.stop()


def client_for(sim: Bmcsim, node: str = NODE, *, credential_of: str | None = None, **kwargs) -> RedfishClient:
    username, password = ("admin", bmc_password(credential_of or node))
    return RedfishClient(BMCAccess(node, sim.url, node, username, password), **kwargs)


def device_identity_ca(sim: Bmcsim):
    """The root the GPUs' SPDM identities chain to, wherever this bmcsim serves it."""
    spdm = sim.get("/bmcsim/v1/roots/spdm")
    if spdm.status_code == 200 and "gpu_device_identity_ca" in spdm.json():
        return load_trust_anchor("gpu_device_identity_ca", spdm.json()["gpu_device_identity_ca"])
    return load_trust_anchor("nvidia_device_root", sim.get("/bmcsim/v1/roots").json()["nvidia_device_root"])


def failures(sim: Bmcsim, entry: dict, nonce: bytes) -> set[tuple[str, str]]:
    evidence = read_spdm_evidence(base64.b64decode(entry["report"]), entry["cert_chain"])
    found = verify_spdm_evidence(evidence, nonce=nonce, root=device_identity_ca(sim), at=datetime.now(UTC))
    return {(f.code, f.component) for f in found}


def test_every_gpu_of_the_node_gives_evidence_that_verifies(sim):
    client, nonce = client_for(sim), secrets.token_bytes(32)
    evidence = client.gpu_spdm_evidence(nonce)
    assert [e["processor"] for e in evidence] == [f"/redfish/v1/Systems/{NODE}/Processors/GPU{i}" for i in range(GPUS)]
    assert all(e["source"] == "out_of_band" and "status" not in e for e in evidence)
    # Redfish's Processor UUID is the GPU's UUID without nvidia-smi's "GPU-" prefix.
    assert [f"GPU-{e['uuid']}" for e in evidence] == [g["uuid"] for g in sim.node(NODE)["gpus"]]
    assert all(failures(sim, entry, nonce) == set() for entry in evidence)
    assert client.calls == CALLS


def test_a_bmc_credential_reaches_its_own_gpus_only(sim):
    nonce = secrets.token_bytes(32)
    operator = RedfishClient(BMCAccess(NODE, sim.url, NODE, *OPERATOR))
    assert {e["processor"].split("/")[4] for e in operator.gpu_spdm_evidence(nonce)} == {NODE}  # of its system only
    # node-002's credential lists node-002's GPUs alone, none of which is node-001's system's.
    assert client_for(sim, credential_of="node-002").gpu_spdm_evidence(nonce) == []
    member = f"/redfish/v1/ComponentIntegrity/{NODE}-GPU0"
    assert sim.get(member, auth=("admin", bmc_password("node-002"))).status_code == 403


def test_a_wrong_nonce_fails_that_gpu_alone(sim):
    fault = {"node": NODE, "kind": "gpu_wrong_nonce", "gpu": 2}
    assert sim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    try:
        nonce = secrets.token_bytes(32)
        evidence = client_for(sim).gpu_spdm_evidence(nonce)
    finally:
        sim.delete(f"/bmcsim/v1/faults?node={NODE}")
    assert [failures(sim, entry, nonce) for entry in evidence] == [
        {("gpu_nonce", "gpu")} if i == 2 else set() for i in range(GPUS)
    ]


def test_a_service_without_component_integrity_has_no_evidence(sushy_emulator):  # noqa: F811 (its fixture)
    client = RedfishClient(BMCAccess("fake-1", sushy_emulator, "x", "admin", "password"))
    assert client.gpu_spdm_evidence(secrets.token_bytes(32)) == []
    assert client.calls == 2  # the collection (404), then the service root, which links none


# -- a BMC that runs the action as a task, as NVIDIA's HGX BMCs do ----------------------------

HGX = "/redfish/v1/Systems/HGX_Baseboard_0"
COLLECTION = "/redfish/v1/ComponentIntegrity"
ACTION = "Actions/ComponentIntegrity.SPDMGetSignedMeasurements"


def hgx_member(name: str, processor: str, kind: str = "SPDM") -> dict:
    member = f"{COLLECTION}/{name}"
    certificate = {"@odata.id": f"{processor}/Certificates/CertChain"}
    return {
        "@odata.id": member,
        "ComponentIntegrityType": kind,
        "ComponentIntegrityEnabled": True,
        "TargetComponentURI": processor,
        "SPDM": {"IdentityAuthentication": {"ResponderAuthentication": {"ComponentCertificate": certificate}}},
        "Actions": {"#ComponentIntegrity.SPDMGetSignedMeasurements": {"target": f"{member}/{ACTION}"}},
    }


def test_an_action_run_as_a_task_is_followed_to_its_result_and_a_failing_gpu_is_unavailable(servers):  # noqa: F811
    bmc, _ = servers
    members = {
        "HGX_GPU_SXM_1": f"{HGX}/Processors/GPU_SXM_1",
        "HGX_GPU_SXM_2": f"{HGX}/Processors/GPU_SXM_2",
        "HGX_GPU_SXM_3": f"{HGX}/Processors/GPU_SXM_3",
        "HGX_ERoT_BMC_0": "/redfish/v1/Chassis/HGX_ERoT_BMC_0",  # no Processor of the system
        "Other_GPU": "/redfish/v1/Systems/Other/Processors/GPU_SXM_1",  # another system's
    }
    for name, processor in members.items():
        bmc.answers[f"{COLLECTION}/{name}"] = (200, {}, hgx_member(name, processor))
        bmc.answers[processor] = (200, {}, {"UUID": f"uuid-of-{name}"})
        bmc.answers[f"{processor}/Certificates/CertChain"] = (200, {}, {"CertificateString": f"PEM of {name}"})
    bmc.answers[f"{COLLECTION}/TPM_0"] = (200, {}, hgx_member("TPM_0", f"{HGX}/Processors/GPU_SXM_1", "TPM"))
    listed = [{"@odata.id": f"{COLLECTION}/{name}"} for name in [*members, "TPM_0"]]
    bmc.answers[COLLECTION] = (200, {}, {"Members": listed})
    # GPU 1: accepted, its task running at the first poll, then done, its result where the task says.
    bmc.answers[f"{COLLECTION}/HGX_GPU_SXM_1/{ACTION}"] = (202, {"Location": "/tasks/1/monitor"}, {})
    bmc.answers["/tasks/1/monitor"] = (202, {}, {"TaskState": "Running"})
    done = {
        "TaskState": "Completed",
        "Payload": {"HttpHeaders": [f"Location: {COLLECTION}/HGX_GPU_SXM_1/{ACTION}/data"]},
    }
    bmc.answers[f"{COLLECTION}/HGX_GPU_SXM_1/{ACTION}/data"] = (200, {}, {"SignedMeasurements": "c2lnbmVk"})
    # GPU 2: its task fails. GPU 3: the action is refused.
    bmc.answers[f"{COLLECTION}/HGX_GPU_SXM_2/{ACTION}"] = (202, {"Location": "/tasks/2/monitor"}, {})
    failed = {"TaskState": "Exception", "Messages": [{"Message": "SPDM responder timed out"}]}
    bmc.answers["/tasks/2/monitor"] = (200, {}, failed)
    refused = {"error": {"message": "The action is not supported now."}}
    bmc.answers[f"{COLLECTION}/HGX_GPU_SXM_3/{ACTION}"] = (400, {}, refused)

    def sleep(seconds: float) -> None:
        bmc.answers["/tasks/1/monitor"] = (200, {}, done)

    client = RedfishClient(BMCAccess("hgx-1", bmc.url, "HGX_Baseboard_0", "admin", "pw"), backoff=0.01, sleep=sleep)
    evidence = client.gpu_spdm_evidence(bytes(32))
    assert evidence[0] == {
        "uuid": "uuid-of-HGX_GPU_SXM_1",
        "processor": f"{HGX}/Processors/GPU_SXM_1",
        "source": "out_of_band",
        "report": "c2lnbmVk",
        "cert_chain": "PEM of HGX_GPU_SXM_1",
    }
    assert [(e["uuid"], e["status"]) for e in evidence[1:]] == [
        ("uuid-of-HGX_GPU_SXM_2", "unavailable"),
        ("uuid-of-HGX_GPU_SXM_3", "unavailable"),
    ]
    assert evidence[1]["reason"].endswith("Exception: SPDM responder timed out")
    assert "400 The action is not supported now." in evidence[2]["reason"]
    posted = [path for method, path, _ in bmc.requests if method == "POST"]
    assert posted == [f"{COLLECTION}/HGX_GPU_SXM_{i}/{ACTION}" for i in (1, 2, 3)]
