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
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest

from agent.host.tpm import create_attestation_key
from attestation.verifier import load_trust_anchor
from attestation.verifier.spdm import read_spdm_evidence, verify_spdm_evidence
from tests.agent import test_host_backend
from tests.agent.test_host_backend import AK_HANDLE, Agent, KernelLog
from tests.support import fake_nvml
from tests.support.ak_certificates import ak_certificate
from tests.support.fake_nvml import FakeConfidentialComputing, h100, put_in_place_of_pynvml, v100
from tests.support.measured_boot import KNOWN_GOOD_BOOT, boot

# The fixtures, by assignment: an imported name that arguments shadow is a lint error.
library = fake_nvml.library
followers = test_host_backend.followers
kernel_log = test_host_backend.kernel_log
start_agent = test_host_backend.start_agent

NVIDIA = Path(__file__).resolve().parent.parent / "data" / "nvidia"
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
