"""What the verifier answers: a verdict and its failures, each under one of FAILURE_CODES (the
package's docstring says what each code means)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FAILURE_CODES = (
    "malformed",
    "stale",
    "ak_chain",
    "ak_identity",
    "quote_format",
    "quote_signature",
    "nonce_mismatch",
    "pcr_selection",
    "unexpected_event",
    "missing_component",
    "pcr_digest",
    "unknown_component_digest",
    "secure_boot_off",
    "gpu_chain",
    "gpu_identity",
    "gpu_signature",
    "gpu_nonce",
    "gpu_measurement",
    "release_retired",
    "release_not_pinned",
    "cc_mode",
    "gpu_inventory",
    "gpu_evidence",
    "gpu_rim",
    "gpu_revocation",
    "verifier_error",
)
GPU_EVIDENCE_STATUSES = ("affirming", "contraindicated", "unavailable")

MAX_SHOWN_CHARS = 160  # of a found value, in a failure


@dataclass(frozen=True)
class Failure:
    code: str
    component: str
    expected: str
    found: str


@dataclass(frozen=True)
class GpuEvidence:
    """What one source's SPDM evidence of one GPU came to (the policy's required sources, each)."""

    index: int
    uuid: str
    source: str  # in_band (the node's agent) or out_of_band (its BMC)
    status: str  # one of GPU_EVIDENCE_STATUSES: unavailable when there was none to check
    failures: tuple[Failure, ...]
    versions: Mapping[str, str]  # driver and vbios, as the evidence reports them (when it could be read)


@dataclass(frozen=True)
class Verdict:
    affirming: bool
    failures: tuple[Failure, ...]
    measurements: Mapping[str, str]  # what was measured, component -> hex digest, for display
    gpu_evidence: tuple[GpuEvidence, ...] = ()


def shown(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"
