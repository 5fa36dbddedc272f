"""bmcsim's GPUs' SPDM evidence as the control plane's verifier takes it, made in the test process
from bmcsim's own modules: what its BMCs serve out of band, and the references (its simulated
NVIDIA roots and signed RIMs) that evidence is checked against."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import requests
from cryptography.x509 import load_pem_x509_certificate

from attestation.verifier.gpu_evidence import CandidateRim, GpuReferences, rim_lookup
from bmcsim import gpu_rims, spdm
from bmcsim.pki import PKI
from bmcsim.state import NodeState

ALL_BLOCKS = 0xFF


def simulated_gpu_references(pki: PKI, directory: Path) -> GpuReferences:
    """bmcsim's device identity CA and RIM root, and every RIM it publishes; no revocation check."""
    rims = []
    for rim_id in gpu_rims.catalogue():
        xml = gpu_rims.document(pki, directory, rim_id)
        assert xml is not None
        rims.append(CandidateRim(rim_id, xml))
    return GpuReferences(
        device_root=pki.device_identity_ca, rim_root=pki.rim_root, rims=rim_lookup(rims), revocation=None
    )


def bmc_gpu_evidence(node: NodeState, pki: PKI, nonce: bytes, now: float) -> list[dict]:
    """Each GPU's SPDM evidence as the node's BMC gives it (workflows' gpu_spdm_evidence)."""
    return [
        {
            "uuid": gpu.uuid,
            "source": "out_of_band",
            "report": base64.b64encode(
                spdm.signed_measurements(node, gpu.index, pki, nonce, 0, ALL_BLOCKS, now)
            ).decode(),
            "cert_chain": "".join(spdm.identity(node, gpu.index, pki)[1]),
        }
        for gpu in node.spec.gpus
    ]


def served_gpu_references(get: Callable[[str], requests.Response]) -> GpuReferences:
    """The same references as a running bmcsim serves them (`get`: a GET of a path on it)."""
    roots = get("/bmcsim/v1/roots").json()
    rims = [
        CandidateRim(rim["rim_id"], requests.get(rim["url"], timeout=10).content)
        for rim in get("/bmcsim/v1/gpu-rims").json()["rims"]
    ]
    return GpuReferences(
        device_root=load_pem_x509_certificate(roots["nvidia_device_root"].encode()),
        rim_root=load_pem_x509_certificate(roots["nvidia_rim_root"].encode()),
        rims=rim_lookup(rims),
        revocation=None,
    )
