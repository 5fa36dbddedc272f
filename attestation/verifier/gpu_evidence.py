"""One NVIDIA GPU's SPDM evidence (its signed measurements and certificate chain) checked end to
end: the report against NVIDIA's Device Identity CA (spdm.py) and every measurement against the
RIMs of its driver and VBIOS (gpu_rims.py), each RIM verified again against NVIDIA's RIM root at
the evidence's time, and the revocation of both chains.

Failures, each a verdict Failure under `component` (the GPU, `<gpu>.driver`, `<gpu>.vbios`):
`malformed` (evidence off its layout), `gpu_chain`, `gpu_signature`, `gpu_nonce` (spdm.py's),
`gpu_rim` (no RIM, several, or one that is not NVIDIA's and valid), `release_retired` (its RIM
was retired), `gpu_measurement` (a measured block differs from its RIM's) and `gpu_revocation`
(a certificate of the device chain, or of a used RIM's signing chain, not known unrevoked).

A missing RIM is a failure: a measurement no RIM accounts for is not known good. NVIDIA publishes
no driver RIM for its sample Hopper report's driver (535.86.09), so that report never passes.
Revocation is the caller's `revocation` (from the OCSP answers kept, fetched where missing): it
says why a chain is not known unrevoked, and is asked only about chains verified to their root.
Without one (the operator waived it) revocation is not checked.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cryptography import x509

from attestation.verifier.fields import MAX_SPDM_REPORT_BYTES, describe
from attestation.verifier.gpu_rims import (
    DRIVER,
    VBIOS,
    GoldenMeasurement,
    compare_measurements,
    read_rim,
    signing_chain,
    verify_rim,
)
from attestation.verifier.spdm import SPDMEvidence, read_spdm_evidence, verify_spdm_evidence
from attestation.verifier.verdict import Failure, shown
from core import validation

# Why a chain (leaf first, root last) is not known unrevoked; empty when it is.
RevocationCheck = Callable[[tuple[x509.Certificate, ...]], list[str]]


@dataclass(frozen=True)
class CandidateRim:
    name: str  # a file's name or an imported RIM's id, for the failures
    xml: bytes
    retired: bool = False


# The RIMs that may be the one of a release: (component, version) -> candidates.
RimLookup = Callable[[str, str], Sequence[CandidateRim]]


@dataclass(frozen=True)
class GpuReferences:
    """What GPU evidence is checked against: NVIDIA's two roots, its RIMs, and revocation."""

    device_root: x509.Certificate
    rim_root: x509.Certificate
    rims: RimLookup
    revocation: RevocationCheck | None


@dataclass(frozen=True)
class GpuEvidenceCheck:
    failures: list[Failure]
    driver_version: str | None = None
    vbios_version: str | None = None
    rims: dict[str, str] = field(default_factory=dict)  # component -> the RIM used


def read_report(data: bytes) -> bytes:
    """NVIDIA's report as its tools write it (hex text, as in tests/data/nvidia/) or as raw bytes."""
    try:
        return bytes.fromhex(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return data


def rim_lookup(candidates: Sequence[CandidateRim]) -> RimLookup:
    """A lookup over RIMs at hand (a directory's): each read once; what is not a RIM is of no release."""
    releases: dict[tuple[str, str], list[CandidateRim]] = {}
    for candidate in candidates:
        try:
            rim = read_rim(candidate.xml)
        except validation.Invalid:
            continue
        releases.setdefault((rim.component, rim.version), []).append(candidate)
    return lambda component, version: releases.get((component, version.lower()), [])


def check_entry(
    entry: Mapping[str, object], *, where: str, component: str, nonce: bytes, references: GpuReferences, at: datetime
) -> GpuEvidenceCheck:
    """An evidence entry {"report": base64, "cert_chain": PEM}, as the agent and the BMC client give it."""
    try:
        report = validation.text(entry.get("report"), f"{where}.report", max_length=4 * MAX_SPDM_REPORT_BYTES)
        try:
            data = base64.b64decode(report, validate=True)
        except ValueError as error:  # binascii.Error, or characters beyond ASCII
            raise validation.Invalid(f"{where}.report", "must be base64", str(error)) from None
        evidence = read_spdm_evidence(data, entry.get("cert_chain"), where)
    except validation.Invalid as invalid:
        expected = invalid.problem.removeprefix("must be ")
        return GpuEvidenceCheck([Failure("malformed", invalid.path, expected, describe(invalid.found))])
    return check_evidence(evidence, component=component, nonce=nonce, references=references, at=at)


def check_gpu_evidence(
    *, report: bytes, chain_pem: str, nonce: bytes, references: GpuReferences, at: datetime, component: str = "gpu"
) -> GpuEvidenceCheck:
    """A report and chain as NVIDIA's tools write them (manage.py verify_gpu_evidence)."""
    try:
        evidence = read_spdm_evidence(report, chain_pem, component)
    except validation.Invalid as invalid:
        expected = invalid.problem.removeprefix("must be ")
        return GpuEvidenceCheck([Failure("malformed", invalid.path, expected, describe(invalid.found))])
    return check_evidence(evidence, component=component, nonce=nonce, references=references, at=at)


def check_evidence(
    evidence: SPDMEvidence, *, component: str, nonce: bytes, references: GpuReferences, at: datetime
) -> GpuEvidenceCheck:
    failures = verify_spdm_evidence(evidence, nonce=nonce, root=references.device_root, at=at, component=component)
    used: dict[str, CandidateRim] = {}
    # A RIM's index is an SPDM measurement block's index less one.
    measured = {index - 1: block.value for index, block in evidence.measurements.items()}
    for kind, version in ((DRIVER, evidence.driver_version), (VBIOS, evidence.vbios_version)):
        where = f"{component}.{kind}"
        golden, problems, candidate = _golden(references, kind, version, where, at)
        failures += problems
        if golden is not None and candidate is not None:
            used[kind] = candidate
            expected = f"the measurements of {kind} RIM {candidate.name}"
            failures += [
                Failure("gpu_measurement", where, expected, shown(difference))
                for difference in compare_measurements(golden, measured)
            ]
    if references.revocation is not None:
        expected = "certificates known unrevoked (OCSP)"
        # Asked only of chains verified to their root (a RIM is used only once verified), so that
        # the check may ask the responders a chain names: a forged chain's URLs are never fetched.
        if not any(failure.code == "gpu_chain" and failure.component == component for failure in failures):
            # Not the device's leaf: the GPU's firmware makes it at boot, and no responder knows
            # it (NVIDIA's own verifier starts at the certificate above it too). A RIM's signer is one.
            device_chain = _ending_at(evidence.chain, references.device_root)[1:]
            # Shown whole: the names are of a chain verified to the root, not the evidence's choice.
            failures += [
                Failure("gpu_revocation", component, expected, problem)
                for problem in references.revocation(device_chain)
            ]
        for kind, candidate in used.items():
            chain = _ending_at(signing_chain(candidate.xml), references.rim_root)
            failures += [
                Failure("gpu_revocation", f"{component}.{kind}", f"{expected}: RIM {candidate.name}", problem)
                for problem in references.revocation(chain)
            ]
    return GpuEvidenceCheck(
        failures,
        evidence.driver_version,
        evidence.vbios_version,
        {kind: candidate.name for kind, candidate in used.items()},
    )


def _ending_at(chain: tuple[x509.Certificate, ...], root: x509.Certificate) -> tuple[x509.Certificate, ...]:
    return chain if chain[-1] == root else (*chain, root)


def _golden(
    references: GpuReferences, kind: str, version: str, where: str, at: datetime
) -> tuple[Mapping[int, GoldenMeasurement] | None, list[Failure], CandidateRim | None]:
    """The golden measurements of the one RIM of that release, or the failures saying why there are none."""
    matching = []
    for candidate in references.rims(kind, version):
        try:
            rim = read_rim(candidate.xml)
        except validation.Invalid:
            continue  # not a RIM: of no release
        if rim.component == kind and rim.version == version.lower():
            matching.append((candidate, rim))
    expected = f"one {kind} RIM for {version}, NVIDIA's, valid at {at.isoformat()}"
    if not matching:
        return None, [Failure("gpu_rim", where, expected, "none imported")], None
    if len(matching) > 1:
        names = ", ".join(candidate.name for candidate, _ in matching)
        return None, [Failure("gpu_rim", where, expected, shown(f"{len(matching)}: {names}"))], None
    [(candidate, rim)] = matching
    problems = [
        Failure("gpu_rim", where, expected, shown(f"RIM {candidate.name}: {problem}"))
        for problem in verify_rim(candidate.xml, root=references.rim_root, at=at)
    ]
    if candidate.retired:
        problems.append(Failure("release_retired", where, "a release not retired", f"{kind} {version} (retired)"))
    if problems:
        return None, problems, None
    return rim.golden, [], candidate
