"""The appraisal: every check of the evidence against the node, the policy, the reference values
and the trusted roots, each failure recorded, never only the first."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ParamSpec, TypeVar

from cryptography import x509
from cryptography.x509.oid import NameOID

from attestation.policy import SECURE_BOOT_PCR, Policy
from attestation.reference import GPU_PREFIX, ReferenceValues
from attestation.verifier.anchors import TrustedRoots
from attestation.verifier.chains import Leaf, name_attribute, pem_chain, verified_chain
from attestation.verifier.event_log import (
    SECURE_BOOT_COMPONENT,
    SECURE_BOOT_MEASURED,
    ZERO_PCR,
    Event,
    parse_event_log,
)
from attestation.verifier.fields import MAX_ATTEST_BYTES, MAX_GPUS, MAX_SIGNATURE_BYTES, base64_bytes, describe
from attestation.verifier.gpu_evidence import GpuEvidenceCheck, GpuReferences, check_entry
from attestation.verifier.gpu_reports import GPU_INDEX, read_gpu_report, verifies_p384
from attestation.verifier.identities import GPUIdentity, NodeIdentity
from attestation.verifier.nonces import CLOCK_SKEW, nonce_issued_at
from attestation.verifier.tpm_quote import verify_quote
from attestation.verifier.verdict import Failure, GpuEvidence, Verdict, shown
from core import validation

Params = ParamSpec("Params")
IN_BAND = "in_band"
Checked = TypeVar("Checked")


def verify(
    *,
    evidence: object,
    nonce: bytes,
    node: NodeIdentity,
    reference: ReferenceValues,
    policy: Policy,
    roots: TrustedRoots,
    now: datetime,
    gpu_references: GpuReferences | None = None,
    bmc_evidence: object = None,
) -> Verdict:
    """`evidence`: the agent's; `bmc_evidence`: the GPUs' SPDM evidence read through the node's BMC
    (a list of {"uuid", "report", "cert_chain"} or {"uuid", "status": "unavailable", "reason"}), where
    the policy asks for it; `gpu_references`: what SPDM evidence is checked against (None: nothing
    configured, and every GPU's required SPDM evidence fails)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    appraisal = _Appraisal(
        nonce=nonce,
        node=node,
        reference=reference,
        policy=policy,
        roots=roots,
        now=now,
        gpu_references=gpu_references,
    )
    try:
        appraisal.run(evidence, bmc_evidence)
    except Exception as err:  # a bug here must refuse the node, never pass it or crash the workflow
        appraisal.fail("verifier_error", "verifier", "no internal error", f"{type(err).__name__}: {err}")
    failures = tuple(appraisal.failures)
    return Verdict(
        affirming=not failures,
        failures=failures,
        measurements=appraisal.measurements,
        gpu_evidence=tuple(appraisal.gpu_evidence),
    )


@dataclass
class _Appraisal:
    nonce: bytes
    node: NodeIdentity
    reference: ReferenceValues
    policy: Policy
    roots: TrustedRoots
    now: datetime
    gpu_references: GpuReferences | None
    failures: list[Failure] = field(default_factory=list)
    measurements: dict[str, str] = field(default_factory=dict)
    gpu_evidence: list[GpuEvidence] = field(default_factory=list)

    def fail(self, code: str, component: str, expected: str, found: str) -> None:
        self.failures.append(Failure(code, component, expected, shown(found)))

    def fail_unaccepted(self, code: str, where: str, entry_component: str, expected: str, digest: str) -> None:
        """A digest not accepted: a known release refused for this node (retired, or not one its
        class is pinned to) fails as such, naming the release; any other digest fails as `code`."""
        refusal = self.reference.refused.get(entry_component, {}).get(digest)
        if refusal is None:
            self.fail(code, where, expected, digest)
        elif refusal.retired:
            self.fail("release_retired", where, "a release not retired", f"{refusal.release} (retired)")
        else:
            self.fail("release_not_pinned", where, "a release this node class is pinned to", refusal.release)

    def run(self, evidence: object, bmc_evidence: object) -> None:
        self.check_freshness()
        parts = self.guarded(
            validation.mapping, evidence, "evidence", expected="an object with quote, event_log and gpus"
        )
        if parts is None:
            return
        events = self.guarded(parse_event_log, parts.get("event_log"))
        replayed = self.check_events(events) if events is not None else None
        if events is not None and self.policy.secure_boot_required:
            self.check_secure_boot(events)
        self.guarded(self.check_quote, parts.get("quote"), replayed)
        if self.policy.gpu_measurements:
            self.guarded(self.check_gpus, parts.get("gpus"))
        for source in self.policy.gpu_evidence:
            entries = parts.get("gpu_spdm") if source == IN_BAND else bmc_evidence
            self.guarded(self.check_gpu_spdm, source, entries)

    def guarded(self, check: Callable[Params, Checked], *args: Params.args, **kwargs: Params.kwargs) -> Checked | None:
        """Run a check; evidence off its shape (core.validation.Invalid) is a `malformed` failure."""
        try:
            return check(*args, **kwargs)
        except validation.Invalid as invalid:
            expected = invalid.problem.removeprefix("must be ")
            self.failures.append(Failure("malformed", invalid.path, expected, describe(invalid.found)))
            return None

    def check_freshness(self) -> None:
        issued = nonce_issued_at(self.nonce)
        limit = timedelta(seconds=self.policy.max_evidence_age_seconds)
        expected = f"a nonce issued within {self.policy.max_evidence_age_seconds} s before {self.now.isoformat()}"
        if issued is None:
            self.fail("stale", "nonce", expected, "a nonce that carries no issue time (not from new_nonce)")
        elif not self.now - limit <= issued <= self.now + CLOCK_SKEW:
            self.fail("stale", "nonce", expected, f"issued at {issued.isoformat()}")

    # The TPM quote.

    def check_quote(self, document: object, replayed: dict[int, bytes] | None) -> None:
        quote_doc = validation.mapping(document, "quote", expected="an object with attest, signature and ak_cert")
        attest = base64_bytes(quote_doc.get("attest"), "quote.attest", MAX_ATTEST_BYTES)
        signature = base64_bytes(quote_doc.get("signature"), "quote.signature", MAX_SIGNATURE_BYTES)
        chain = self.guarded(pem_chain, [quote_doc.get("ak_cert")], ["quote.ak_cert"])
        ak = None
        if chain is not None:
            leaf = self.check_chain(chain, self.roots.manufacturer_ca, "ak_chain", "quote.ak_cert")
            ak = leaf.public_key
            self.check_subject(leaf.certificate, self.node.name, self.node.serial, "ak_identity", "quote.ak_cert")
        self.failures.extend(verify_quote(attest, signature, ak, self.nonce, pcrs=replayed)[1])

    def check_chain(self, pems: tuple[str, ...], root: x509.Certificate, code: str, component: str) -> Leaf:
        leaf, problem = verified_chain(pems, root)
        if problem is None:
            certificates = (*leaf.chain, root)
            expired = [c for c in certificates if not c.not_valid_before_utc <= self.now <= c.not_valid_after_utc]
            if expired:
                problem = f"a certificate not valid at {self.now.isoformat()}: {expired[0].subject.rfc4514_string()}"
        if problem is not None:
            self.fail(code, component, f"a chain to {root.subject.rfc4514_string()} valid now", problem)
        return leaf

    def check_subject(self, certificate: x509.Certificate, name: str, serial: str, code: str, component: str) -> None:
        subject = certificate.subject
        found = (name_attribute(subject, NameOID.COMMON_NAME), name_attribute(subject, NameOID.SERIAL_NUMBER))
        if found != (name, serial):
            self.fail(code, component, f"CN={name}, serialNumber={serial}", f"CN={found[0]}, serialNumber={found[1]}")

    # The measured-boot event log.

    def check_events(self, events: list[Event]) -> dict[int, bytes]:
        """Check each event against the policy and reference values; return the replayed PCRs."""
        pcrs = {pcr: ZERO_PCR for pcr in self.policy.quoted_pcrs}
        for position, (pcr, digest, component) in enumerate(events):
            where = f"event_log[{position}]"
            expected_pcr = self.policy.boot_pcrs.get(component)
            if expected_pcr is None:
                self.fail("unexpected_event", where, "a component the policy measures", component)
            elif pcr != expected_pcr:
                self.fail("unexpected_event", where, f"{component} in PCR {expected_pcr}", f"{component} in PCR {pcr}")
            if pcr in pcrs:
                pcrs[pcr] = hashlib.sha256(pcrs[pcr] + digest).digest()
            if expected_pcr is None:
                continue
            hex_digest = digest.hex()
            label = component if component not in self.measurements else f"{component}[{position}]"
            self.measurements[label] = hex_digest
            if hex_digest not in self.reference.components.get(component, ()):
                self.fail_unaccepted(
                    "unknown_component_digest", component, component, f"a reference digest of {component}", hex_digest
                )
        measured = {component for _, _, component in events}
        for component in self.policy.boot_pcrs:
            if component not in measured:
                self.fail("missing_component", component, f"a measurement of {component}", "none in the event log")
        return pcrs

    def check_secure_boot(self, events: list[Event]) -> None:
        """The policy requires Secure Boot: PCR 7 holds the SecureBoot variable measured enabled, and
        never disabled. Read by digest, whatever the agent names the event; the quote of PCR 7 (which
        the policy requires) vouches for the events."""
        measured = {SECURE_BOOT_MEASURED.get(digest) for pcr, digest, _ in events if pcr == SECURE_BOOT_PCR}
        if "Disabled" in measured:
            self.fail("secure_boot_off", SECURE_BOOT_COMPONENT, "Enabled", "Disabled")
        elif "Enabled" not in measured:
            self.fail("secure_boot_off", SECURE_BOOT_COMPONENT, "Enabled", "not measured")

    # The GPU reports.

    def check_gpus(self, document: object) -> None:
        document = validation.sequence(document, "gpus", max_items=MAX_GPUS, expected="a list of GPU reports")
        enrolled = {gpu.index: gpu for gpu in self.node.gpus}
        reported: set[int] = set()
        for position, report in enumerate(document):
            self.guarded(self.check_gpu, report, f"gpus[{position}]", enrolled, reported)
        for index in sorted(enrolled.keys() - reported):
            self.fail("gpu_inventory", f"gpu{index}", f"a report from {enrolled[index].uuid}", "no report")

    def check_gpu(self, report: object, where: str, enrolled: dict[int, GPUIdentity], reported: set[int]) -> None:
        report = validation.mapping(report, where, expected="a GPU report object")
        index = validation.integer(
            report.get("index"), f"{where}.index", minimum=0, maximum=MAX_GPUS - 1, expected=GPU_INDEX
        )
        # A report that names its GPU counts as that GPU's, even if it turns out malformed.
        duplicate = index in reported
        reported.add(index)
        read = read_gpu_report(report, where)
        # Every field is well-formed from here on: the report is a GPU's, named by its index.
        component = f"gpu{index}"
        enrolled_gpu = enrolled.get(index)
        if enrolled_gpu is None:
            self.fail("gpu_inventory", component, f"an enrolled GPU index ({_indexes(enrolled)})", str(index))
        elif duplicate:
            self.fail("gpu_inventory", component, "one report per GPU", "a second report")
        elif read.uuid != enrolled_gpu.uuid:
            self.fail("gpu_inventory", component, enrolled_gpu.uuid, read.uuid)

        leaf = self.check_chain(read.chain, self.roots.gpu_vendor_root, "gpu_chain", component)
        if enrolled_gpu is not None:
            self.check_subject(leaf.certificate, enrolled_gpu.uuid, enrolled_gpu.serial, "gpu_identity", component)
        if not verifies_p384(leaf.public_key, read.signature, read.signed):
            self.fail("gpu_signature", component, "a valid ECDSA P-384 signature by the device key", "invalid")
        if read.nonce != self.nonce.hex():
            self.fail("gpu_nonce", component, self.nonce.hex(), read.nonce)
        self.check_gpu_measurements(component, read.measurements)
        if read.cc_mode != self.policy.cc_mode:
            self.fail("cc_mode", component, self.policy.cc_mode, read.cc_mode)

    def check_gpu_measurements(self, component: str, measurements: Mapping[str, str]) -> None:
        """Every measurement the policy names, each a reference digest; and no other."""
        allowed_digests = self.reference.gpu
        for name in self.policy.gpu_measurements:
            value = measurements.get(name)
            if value is None:
                self.fail("gpu_measurement", f"{component}.{name}", f"a {name} measurement", "none")
                continue
            self.measurements[f"{component}.{name}"] = value
            if value not in allowed_digests.get(name, ()):
                self.fail_unaccepted(
                    "gpu_measurement", f"{component}.{name}", GPU_PREFIX + name, f"a reference digest of {name}", value
                )
        for name in sorted(measurements.keys() - set(self.policy.gpu_measurements)):
            self.fail("gpu_measurement", f"{component}.{name}", "only the measurements the policy names", name)

    # The GPUs' SPDM evidence, from the agent (in band) or the BMC (out of band).

    def check_gpu_spdm(self, source: str, document: object) -> None:
        """Each enrolled GPU's entry from `source`: the agent names it by index, the BMC by UUID."""
        where = "gpu_spdm" if source == IN_BAND else "bmc_gpu_spdm"
        entries = validation.sequence(
            [] if document is None else document, where, max_items=MAX_GPUS, expected="a list of GPU evidence"
        )
        found: dict[int, tuple[str, Mapping[str, object]]] = {}
        by_uuid = {_uuid_key(gpu.uuid): gpu.index for gpu in self.node.gpus}
        for position, entry in enumerate(entries):
            at = f"{where}[{position}]"
            entry = validation.mapping(entry, at, expected="a GPU evidence object")
            if source != IN_BAND and "uuid" not in entry and entry.get("status") == "unavailable":
                continue  # the BMC could not tell which GPU: that GPU's evidence is missing, and fails so
            uuid = validation.text(entry.get("uuid"), f"{at}.uuid", max_length=128)
            if source == IN_BAND:
                index = validation.integer(
                    entry.get("index"), f"{at}.index", minimum=0, maximum=MAX_GPUS - 1, expected=GPU_INDEX
                )
            elif _uuid_key(uuid) in by_uuid:
                index = by_uuid[_uuid_key(uuid)]
            else:
                self.fail("gpu_inventory", at, "the UUID of an enrolled GPU", uuid)
                continue
            if index in found:
                self.fail("gpu_inventory", f"gpu{index}.{source}", "one entry per GPU", "a second entry")
                continue
            found[index] = (at, entry)
        for gpu in self.node.gpus:
            at, entry = found.pop(gpu.index, (where, {}))
            self.gpu_evidence.append(self.check_one_gpu_spdm(gpu, source, at, entry))
        for index in sorted(found):
            self.fail(
                "gpu_inventory",
                f"gpu{index}.{source}",
                f"an enrolled GPU index ({_indexes(gpu.index for gpu in self.node.gpus)})",
                str(index),
            )

    def check_one_gpu_spdm(self, gpu: GPUIdentity, source: str, where: str, entry: Mapping[str, object]) -> GpuEvidence:
        component = f"gpu{gpu.index}.{source}"
        failures: list[Failure] = []
        versions: dict[str, str] = {}
        status = "contraindicated"
        if _uuid_key(str(entry.get("uuid", gpu.uuid))) != _uuid_key(gpu.uuid):
            failures.append(Failure("gpu_inventory", component, gpu.uuid, shown(str(entry.get("uuid")))))
        if not entry or entry.get("status") == "unavailable":
            why = entry.get("reason") if entry else "none given"
            failures.append(Failure("gpu_evidence", component, f"{source} SPDM evidence", shown(f"unavailable: {why}")))
            status = "unavailable"
        elif self.gpu_references is None:
            failures.append(Failure("gpu_evidence", component, "NVIDIA's device and RIM roots configured", "none"))
        else:
            checked: GpuEvidenceCheck = check_entry(
                entry, where=where, component=component, nonce=self.nonce, references=self.gpu_references, at=self.now
            )
            failures += checked.failures
            versions = {
                kind: version
                for kind, version in (("driver", checked.driver_version), ("vbios", checked.vbios_version))
                if version is not None
            }
        self.failures.extend(failures)
        return GpuEvidence(
            index=gpu.index,
            uuid=gpu.uuid,
            source=source,
            status="affirming" if not failures else status,
            failures=tuple(failures),
            versions=versions,
        )


def _uuid_key(uuid: str) -> str:
    """NVML names a GPU "GPU-<uuid>"; a BMC's Processor resource gives the bare UUID."""
    return uuid.lower().removeprefix("gpu-")


def _indexes(enrolled: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(enrolled))) or "none enrolled"
