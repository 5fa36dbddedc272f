"""The GPUs' own attestation evidence, in band: the host backend asks each GPU over NVML for its SPDM
report over the verifier's nonce and for its certificate chain, and the evidence route gives them
under `gpu_spdm`, or says per GPU why it has none.

As in test_host_backend.py, the agent runs whole behind its HTTP layer with a software TPM, and
only NVIDIA's library is faked: tests/support/fake_nvml.py's FakeLibrary, with libnvidia-ml's
confidential-computing calls beside it (FakeConfidentialComputing), which give NVIDIA's own captured
Hopper report and chain (tests/data/nvidia) for GPU 0.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest
from django.conf import settings

from agent.host.tpm import create_attestation_key
from attestation.policy import load_policy
from attestation.reference import parse_manifest, reference_values
from attestation.verifier import GPUIdentity, load_trust_anchor, verify
from attestation.verifier.gpu_evidence import CandidateRim, GpuReferences, rim_lookup
from attestation.verifier.spdm import read_spdm_evidence, verify_spdm_evidence
from tests.agent import test_host_backend
from tests.agent.test_host_backend import AK_HANDLE, Agent, KernelLog
from tests.support import fake_nvml
from tests.support.ak_certificates import NODE, ak_certificate
from tests.support.fake_nvml import FakeConfidentialComputing, h100, put_in_place_of_pynvml, v100
from tests.support.measured_boot import KNOWN_GOOD_BOOT, boot, known_good_manifest

# The fixtures, by assignment: an imported name that arguments shadow is a lint error.
library = fake_nvml.library
followers = test_host_backend.followers
kernel_log = test_host_backend.kernel_log
start_agent = test_host_backend.start_agent

NVIDIA = Path(__file__).resolve().parent.parent / "data" / "nvidia"
RIMS = NVIDIA.parent / "nvidia_rims"
VBIOS_RIM = "1010_0200_882_96005E0001_PROD.swidtag"  # the RIM of the Hopper report's VBIOS
NVIDIA_ROOT = load_trust_anchor("gpu_vendor_root", (NVIDIA / "nvidia_device_identity_ca.pem").read_text())
AT = datetime(2026, 1, 1, tzinfo=UTC)  # inside the Hopper chain's validity
# The nonce NVIDIA's captured Hopper report was signed over (nv-attestation-sdk-cpp/unit-tests/test_utils.cpp).
HOPPER_NONCE = bytes.fromhex("27a328247bf7935c993341cf587be6f05986ccce4fe7ba2c54100bd616a58f66")
HOPPER_REPORT = bytes.fromhex((NVIDIA / "hopperAttestationReport.txt").read_text().strip())
HOPPER_CHAIN = (NVIDIA / "hopperCertChain.txt").read_text()


@pytest.fixture
def confidential_computing(library, monkeypatch) -> FakeConfidentialComputing:
    """A system with confidential computing on, its GPU 0 (the H100) giving NVIDIA's Hopper evidence."""
    fake = FakeConfidentialComputing(library)
    fake.captured[0] = (HOPPER_NONCE, HOPPER_REPORT, HOPPER_CHAIN)
    put_in_place_of_pynvml(monkeypatch, fake)
    return fake


@pytest.fixture
def attesting_agent(start_agent, kernel_log: KernelLog, tpm, tmp_path, manufacturer_ca) -> Agent:
    """The agent on the H100 and V100 node, booted as known good, with its AK certified."""
    ak_cert = tmp_path / "ak.crt"
    ak_cert.write_text(ak_certificate(create_attestation_key(tcti=tpm.tcti, handle=AK_HANDLE), manufacturer_ca))
    event_log = tmp_path / "binary_bios_measurements"
    boot(tpm, event_log, KNOWN_GOOD_BOOT)
    return start_agent(kernel_log.path, tcti=tpm.tcti, ak=f"{AK_HANDLE:#x}", ak_cert=ak_cert, event_log=event_log)


def gpu_spdm(agent: Agent, nonce: bytes) -> list[dict]:
    answer = agent.post("/evidence", {"nonce": nonce.hex()})
    assert answer.status_code == 200, answer.text
    evidence = answer.json()
    assert evidence["gpus"] == []  # the simulated GPUs' shape, which the control plane's verifier reads
    return evidence["gpu_spdm"]


def test_the_gpu_in_confidential_computing_gives_its_signed_report_and_one_without_says_why(
    confidential_computing, attesting_agent
):
    hopper, volta = gpu_spdm(attesting_agent, HOPPER_NONCE)

    assert {k: hopper[k] for k in ("index", "uuid", "source", "cert_chain")} == {
        "index": 0,
        "uuid": h100().uuid,
        "source": "in_band",
        "cert_chain": HOPPER_CHAIN,
    }
    report = base64.b64decode(hopper["report"], validate=True)
    assert report == HOPPER_REPORT
    evidence = read_spdm_evidence(report, hopper["cert_chain"])
    assert verify_spdm_evidence(evidence, nonce=HOPPER_NONCE, root=NVIDIA_ROOT, at=AT) == []
    assert volta == {"index": 1, "uuid": v100().uuid, "status": "unavailable", "reason": "unsupported"}


def test_with_confidential_computing_off_a_lost_gpu_or_a_nonce_spdm_cannot_carry_each_gpu_says_why(
    confidential_computing, attesting_agent, library
):
    confidential_computing.feature = pynvml.NVML_CC_SYSTEM_FEATURE_DISABLED
    assert [g["reason"] for g in gpu_spdm(attesting_agent, HOPPER_NONCE)] == ["confidential_computing_off"] * 2

    confidential_computing.feature = pynvml.NVML_CC_SYSTEM_FEATURE_ENABLED
    library.gpus[0].lost = True
    hopper, volta = gpu_spdm(attesting_agent, HOPPER_NONCE)
    assert hopper == {"index": 0, "uuid": h100().uuid, "status": "unavailable", "reason": "NVMLError_GpuIsLost"}
    assert volta["reason"] == "unsupported"

    library.gpus[0].lost = False
    assert [g["reason"] for g in gpu_spdm(attesting_agent, HOPPER_NONCE[:16])] == ["nonce_not_32_bytes"] * 2


def test_the_control_planes_appraisal_verifies_nvidias_report_through_the_agent_to_its_vbios_rim(
    confidential_computing, attesting_agent, roots
):
    """A real server's policy (SPDM evidence in band, none of bmcsim's own reports) on NVIDIA's
    Hopper evidence as the agent gives it: the chain to NVIDIA's real root, the signature, the nonce
    and every VBIOS measurement against NVIDIA's VBIOS RIM pass, as of a day inside that RIM's
    validity. What does not: NVIDIA publishes no driver RIM for the report's driver, and the
    captured nonce carries no issue time (stale), nor is the test's TPM certificate that old; and
    the node's V100 cannot attest at all."""
    evidence = attesting_agent.post("/evidence", {"nonce": HOPPER_NONCE.hex()}).json()
    document = tomllib.loads(Path(settings.ATTESTATION_POLICY_FILE).read_text())
    document["gpu"].update(evidence="in_band", measurements=[])
    rim_at = datetime(2024, 6, 1, tzinfo=UTC)
    verdict = verify(
        evidence=evidence,
        nonce=HOPPER_NONCE,
        node=dataclasses.replace(  # the node the AK certificate names, with its GPUs
            NODE, gpus=tuple(GPUIdentity(i, gpu.uuid, str(gpu.serial)) for i, gpu in enumerate((h100(), v100())))
        ),
        reference=reference_values(parse_manifest(known_good_manifest(KNOWN_GOOD_BOOT))),
        policy=load_policy(json.dumps(document), format="json"),
        roots=roots,
        now=rim_at,
        gpu_references=GpuReferences(
            device_root=NVIDIA_ROOT,
            rim_root=load_trust_anchor("nvidia_rim_root", (RIMS / "verifier_RIM_root.pem").read_text()),
            rims=rim_lookup([CandidateRim(VBIOS_RIM, (RIMS / VBIOS_RIM).read_bytes())]),
            revocation=None,
        ),
    )
    gpu_failures = [(f.code, f.component, f.found) for f in verdict.failures if f.component.startswith("gpu")]
    assert gpu_failures == [
        ("gpu_rim", "gpu0.in_band.driver", "none imported"),
        ("gpu_evidence", "gpu1.in_band", "unavailable: unsupported"),  # a V100 has no SPDM responder
    ]
    assert {f.code for f in verdict.failures} - {"gpu_rim", "gpu_evidence"} == {"stale", "ak_chain"}
    hopper, _ = verdict.gpu_evidence
    assert (hopper.source, hopper.status, dict(hopper.versions)) == (
        "in_band",
        "contraindicated",
        {"driver": "535.86.09", "vbios": "96.00.5E.00.01"},
    )
