"""One NVIDIA GPU's evidence (its SPDM report and certificate chain) checked end to end: the report
against NVIDIA's Device Identity CA (attestation/verifier/spdm.py) and every measurement against
the RIMs of its driver and VBIOS (attestation/verifier/gpu_rims.py), each RIM verified again
against NVIDIA's RIM root at the evidence's time.

A missing RIM is a failure: a measurement no RIM accounts for is not known good. NVIDIA publishes
no driver RIM for its sample Hopper report's driver (535.86.09), so that report never passes.
Revocation is the caller's `revocation` (attestation/ocsp.py, from the OCSP answers kept): it says
why the device chain, or the signing chain of a RIM used, is not known unrevoked. A certificate
without an answer fails; an answer past its nextUpdate will do only as old as the policy allows.
Without one (the operator waived it) revocation is not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from attestation.verifier.gpu_rims import (
    DRIVER,
    VBIOS,
    GoldenMeasurement,
    compare_measurements,
    read_rim,
    signing_chain,
    verify_rim,
)
from attestation.verifier.spdm import read_spdm_evidence, verify_spdm_evidence
from core import validation

# Why a chain (leaf first, root last) is not known unrevoked; empty when it is.
RevocationCheck = Callable[[tuple[x509.Certificate, ...]], list[str]]


@dataclass(frozen=True)
class CandidateRim:
    name: str  # a file's name or an imported RIM's id, for the failures
    xml: bytes
    retired: bool = False


def read_report(data: bytes) -> bytes:
    """NVIDIA's report as its tools write it (hex text, as in tests/data/nvidia/) or as raw bytes."""
    try:
        return bytes.fromhex(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return data


def check_gpu_evidence(
    *,
    report: bytes,
    chain_pem: str,
    nonce: bytes,
    device_root: x509.Certificate,
    rim_root: x509.Certificate,
    rims: Iterable[CandidateRim],
    at: datetime,
    revocation: RevocationCheck | None,
) -> dict:
    """{"failures": [...], "driver_version", "vbios_version", "rims": {component: name}}; no
    failures only when every check passed. `rims`: those to find the driver's and VBIOS's among."""
    try:
        evidence = read_spdm_evidence(report, chain_pem)
    except validation.Invalid as error:
        return {"failures": [f"malformed: {error}"], "driver_version": None, "vbios_version": None, "rims": {}}
    failures = [
        f"{f.code} {f.component}: expected {f.expected}, found {f.found}"
        for f in verify_spdm_evidence(evidence, nonce=nonce, root=device_root, at=at)
    ]
    used: dict[str, CandidateRim] = {}
    # A RIM's index is an SPDM measurement block's index less one.
    measured = {index - 1: block.value for index, block in evidence.measurements.items()}
    candidates = list(rims)
    for component, version in ((DRIVER, evidence.driver_version), (VBIOS, evidence.vbios_version)):
        golden, problems, candidate = _golden(candidates, component, version, rim_root, at)
        failures += problems
        if golden is not None and candidate is not None:
            used[component] = candidate
            failures += [
                f"{component} RIM {candidate.name}: {failure}" for failure in compare_measurements(golden, measured)
            ]
    if revocation is not None:
        # Not the device's leaf: the GPU's firmware makes it at boot, and no responder knows it
        # (NVIDIA's own verifier starts at the certificate above it too). A RIM's signer is one.
        failures += revocation(_ending_at(evidence.chain, device_root)[1:])
        for component, candidate in used.items():
            chain = _ending_at(signing_chain(candidate.xml), rim_root)
            failures += [f"{component} RIM {candidate.name}: {failure}" for failure in revocation(chain)]
    return {
        "failures": failures,
        "driver_version": evidence.driver_version,
        "vbios_version": evidence.vbios_version,
        "rims": {component: candidate.name for component, candidate in used.items()},
    }


def _ending_at(chain: tuple[x509.Certificate, ...], root: x509.Certificate) -> tuple[x509.Certificate, ...]:
    return chain if chain[-1] == root else (*chain, root)


def _golden(
    candidates: list[CandidateRim], component: str, version: str, rim_root: x509.Certificate, at: datetime
) -> tuple[dict[int, GoldenMeasurement] | None, list[str], CandidateRim | None]:
    """The golden measurements of the one RIM of that release, or the failures saying why there are none."""
    matching = []
    for candidate in candidates:
        try:
            rim = read_rim(candidate.xml)
        except validation.Invalid:
            continue  # not a RIM: of no release
        if rim.component == component and rim.version == version.lower():
            matching.append((candidate, rim))
    if not matching:
        return None, [f"no {component} RIM for {version}"], None
    if len(matching) > 1:
        names = ", ".join(candidate.name for candidate, _ in matching)
        return None, [f"{len(matching)} {component} RIMs for {version} ({names}): which one is NVIDIA's?"], None
    [(candidate, rim)] = matching
    problems = [
        f"{component} RIM {candidate.name}: {failure}" for failure in verify_rim(candidate.xml, root=rim_root, at=at)
    ]
    if candidate.retired:
        problems.append(f"{component} RIM {candidate.name}: release retired")
    if problems:
        return None, problems, None
    return dict(rim.golden), [], candidate
