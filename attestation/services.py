"""Appraising a node's evidence with the configured anchors, reference values and policy, and
keeping every signed verdict. The checks themselves are the pure attestation/verifier/.

Attestation knows a node only by what its callers say of it (`NodeToAppraise`: its identity and
its GPU models, which choose the policy) and by the string reference of its results' foreign
key: it imports nothing of the fleet app."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from gpufleet_client.offline_verification import ResultInvalid, verify_result

from attestation import ear, gpu_rims_import, ocsp, reference, verifier
from attestation.models import (
    REQUIRED_ROLES,
    AttestationPolicy,
    AttestationResult,
    GpuRim,
    ReferenceValue,
    ResultKind,
    TrustAnchor,
    TrustAnchorRole,
)
from attestation.policy import Policy, PolicyError, load_policy_file
from attestation.verifier.gpu_evidence import CandidateRim, GpuReferences
from core import clock

log = logging.getLogger(__name__)
VERIFIER_ID = "gpu-fleet/attestation.verifier"


class NotConfigured(Exception):
    """The verifier lacks something it needs (trust anchors, reference values, a signing key)."""


class NothingToHandOff(Exception):
    """The node has no affirming inspection result that still verifies: nothing vouches for it."""


@dataclass(frozen=True)
class NodeToAppraise:
    identity: verifier.NodeIdentity  # name, serial and the GPUs expected
    gpu_models: Collection[str]  # the node's class: which policy applies
    # What the caller's firmware check found the node running (and repaired), as its BMC reports it:
    # signed into the result as read, for the tenant; None where no firmware was checked.
    firmware: dict | None = None
    # The releases its class may boot (its firmware baseline's boot_releases); empty: any not retired.
    boot_releases: Collection[str] = ()
    # Its memberships of the fabrics as the caller last read them back (ear.py's `networks` claim):
    # signed into the result as given; None where the caller read none.
    networks: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Appraisal:
    verdict: verifier.Verdict
    token: str
    kid: str
    policy: str


# -- configuration -------------------------------------------------------------------------


def signing_keys() -> list[tuple[str, Ed25519PrivateKey]]:
    """The result-signing keys: the first signs, the rest stay in the JWKS. They are read again
    whenever a key file is added, removed or replaced, so a rotation needs no restart. A development
    setup without GPUFLEET_SIGNING_KEY gets a key generated under var/signing-keys once."""
    spec = settings.GPUFLEET_SIGNING_KEY
    path = Path(spec)
    if not path.exists() and spec == str(settings.DEFAULT_SIGNING_KEY_DIR):
        path.mkdir(parents=True, exist_ok=True)
        # A file's name, compared with nothing the database wrote: the process's clock will do.
        kid, _ = ear.generate_signing_key(path / f"{timezone.now():%Y-%m-%dT%H%M%S}.pem")
        log.warning("generated a development result-signing key %s in %s", kid, path)
    try:
        return _signing_keys_as_of(spec, ear.signing_key_files_version(spec))
    except ear.SigningKeyError as error:
        raise NotConfigured(f"no result-signing key: {error}") from error


@functools.lru_cache(maxsize=4)
def _signing_keys_as_of(spec: str, version: tuple[object, ...]) -> list[tuple[str, Ed25519PrivateKey]]:
    """The keys, read once per version of the files (ear.signing_key_files_version)."""
    return ear.load_signing_keys(spec)


def public_keys() -> dict:
    return ear.jwks((kid, key.public_key()) for kid, key in signing_keys())


def trusted_roots() -> verifier.TrustedRoots:
    """The roots the chains must end at. An anchor no chain can end at (saved before anchors were
    checked, or written around the checks) counts as missing: inspections wait, saying why."""
    anchors = dict(TrustAnchor.objects.values_list("role", "pem"))
    missing = sorted(set(REQUIRED_ROLES) - set(anchors))
    if missing:
        raise NotConfigured(f"trust anchors not imported: {', '.join(missing)} (manage.py import_trust_anchors)")
    try:
        return _roots(anchors[TrustAnchorRole.MANUFACTURER_CA], anchors[TrustAnchorRole.GPU_VENDOR_ROOT])
    except verifier.UnusableAnchor as unusable:
        raise NotConfigured(f"{unusable} (replace in the admin or with manage.py import_trust_anchors)") from unusable


@functools.lru_cache(maxsize=4)
def _roots(manufacturer_ca: str, gpu_vendor_root: str) -> verifier.TrustedRoots:
    return verifier.TrustedRoots.from_pem(manufacturer_ca=manufacturer_ca, gpu_vendor_root=gpu_vendor_root)


def reference_values(*, pinned: Collection[str] = ()) -> reference.ReferenceValues:
    """The digests a node pinned to these releases may present; retired releases refused."""
    rows = list(ReferenceValue.objects.values_list("release", "component", "digest", "retired_at"))
    if not rows:
        raise NotConfigured("no reference values imported (manage.py import_reference_values)")
    return reference.reference_values(
        (reference.ReferenceEntry(release, component, digest) for release, component, digest, _ in rows),
        retired={release for release, _, _, retired_at in rows if retired_at is not None},
        pinned=pinned,
    )


def policy_for(gpu_models: Collection[str]) -> Policy:
    """The policy of the node's class (its GPU model), else the catch-all one, else the shipped file.
    One that no longer loads (saved before a key became required) is NotConfigured: inspections
    wait, saying why, until an operator completes it."""
    for row in AttestationPolicy.objects.filter(gpu_model__in=[*gpu_models, ""]).order_by("-gpu_model"):
        try:
            return row.load()
        except PolicyError as error:
            raise NotConfigured(f"attestation policy {row.name}: {error} (complete it in the admin)") from error
    return load_policy_file(settings.ATTESTATION_POLICY_FILE)


def imported_rims(component: str, version: str) -> list[CandidateRim]:
    """The imported RIMs of a driver or VBIOS release (verifier.gpu_evidence.RimLookup)."""
    rows = GpuRim.objects.filter(component=component, version=version.lower())
    return [
        CandidateRim(rim_id, xml.encode(), retired_at is not None)
        for rim_id, xml, retired_at in rows.values_list("rim_id", "xml", "retired_at")
    ]


def gpu_references(policy: Policy, *, at: datetime) -> GpuReferences:
    """NVIDIA's roots, the imported RIMs, and revocation by the kept OCSP answers as the policy
    allows them (fetched where missing, unless GPUFLEET_OCSP_FETCH is off: an air-gapped plane)."""
    try:
        device_root = gpu_rims_import.root(TrustAnchorRole.NVIDIA_DEVICE_ROOT)
        rim_root = gpu_rims_import.root(TrustAnchorRole.NVIDIA_RIM_ROOT)
    except verifier.UnusableAnchor as unusable:
        raise NotConfigured(f"{unusable} (replace in the admin or with manage.py import_trust_anchors)") from unusable
    except ValueError as missing:  # not imported: GPU evidence has nothing to be checked against
        raise NotConfigured(str(missing)) from missing
    max_age = policy.ocsp_max_age_seconds
    return GpuReferences(
        device_root=device_root,
        rim_root=rim_root,
        rims=imported_rims,
        revocation=ocsp.revocation_check(
            at=at,
            max_age=timedelta(seconds=max_age) if max_age is not None else None,
            fetch=settings.GPUFLEET_OCSP_FETCH,
            responder=settings.GPUFLEET_OCSP_RESPONDER or None,
        ),
    )


# -- appraisal -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifying:
    """What a node's evidence is appraised against, read before any evidence is asked for."""

    policy: Policy  # of the node's class; its gpu_evidence says where its GPUs' evidence comes from
    reference: reference.ReferenceValues
    roots: verifier.TrustedRoots
    signing_key: tuple[str, Ed25519PrivateKey]  # (kid, key): the newest


def ready_to_appraise(node: NodeToAppraise) -> Verifying:
    """The policy, reference values, trust anchors and signing key an appraisal of `node` needs, or
    NotConfigured: raised before the evidence is asked for, so a fleet whose attestation is not set
    up yet spends no TPM quote and no GPU's SPDM signature at each of its nodes' rechecks."""
    return Verifying(
        policy=policy_for(node.gpu_models),
        reference=reference_values(pinned=node.boot_releases),
        roots=trusted_roots(),
        signing_key=signing_keys()[0],
    )


def appraise(
    *,
    node: NodeToAppraise,
    verifying: Verifying,
    evidence: object,
    nonce: bytes,
    now: datetime | None = None,
    bmc_evidence: object = None,
) -> Appraisal:
    """Verify the evidence (the agent's, and the GPUs' SPDM evidence its BMC gave where the policy
    asks for it) and sign the verdict as of `now` (None: core.clock's). Raises NotConfigured; never
    passes what it cannot check. May ask OCSP responders (gpu_references): a worker's call only."""
    now = now or clock.now()
    policy = verifying.policy
    verdict = verifier.verify(
        evidence=evidence,
        nonce=nonce,
        node=node.identity,
        reference=verifying.reference,
        policy=policy,
        roots=verifying.roots,
        now=now,
        gpu_references=gpu_references(policy, at=now),
        bmc_evidence=bmc_evidence,
    )
    kid, key = verifying.signing_key
    token = ear.sign_result(
        verdict=verdict,
        node=node.identity.name,
        nonce=nonce,
        verifier_id=VERIFIER_ID,
        private_key=key,
        kid=kid,
        now=now,
        firmware=node.firmware,
        networks=node.networks,
    )
    return Appraisal(verdict=verdict, token=token, kid=kid, policy=policy.name)


def record(*, node_id: int, nonce: bytes, appraisal: Appraisal) -> AttestationResult:
    verdict = appraisal.verdict
    return AttestationResult.objects.create(
        node_id=node_id,
        nonce=nonce.hex(),
        affirming=verdict.affirming,
        failures=[
            {"code": f.code, "component": f.component, "expected": f.expected, "found": f.found}
            for f in verdict.failures
        ],
        measurements=dict(verdict.measurements),
        gpu_evidence=ear.gpu_evidence_claim(verdict),
        policy=appraisal.policy,
        kid=appraisal.kid,
        token=appraisal.token,
    )


def sign_handoff(
    *, node_id: int, node_name: str, networks: Mapping[str, object], now: datetime | None = None
) -> AttestationResult:
    """Sign the node's latest inspection verdict again, unchanged, with the networks its caller read
    back for the tenant it is handed to, as of `now` (None: core.clock's); kept as the node's latest
    result. Raises NothingToHandOff, or NotConfigured without a signing key."""
    inspection = AttestationResult.objects.filter(node_id=node_id, kind=ResultKind.INSPECTION).first()
    if inspection is None:
        raise NothingToHandOff(f"node {node_name} has no inspection result")
    if not inspection.affirming:
        raise NothingToHandOff(f"node {node_name}'s latest inspection did not affirm it")
    try:
        claims = verify_result(inspection.token, public_keys())
    except ResultInvalid as invalid:
        raise NothingToHandOff(f"node {node_name}'s inspection result does not verify: {invalid}") from invalid
    if claims.get("node") != node_name:
        raise NothingToHandOff(f"node {node_name}'s inspection result is about {claims.get('node')!r}")
    kid, key = signing_keys()[0]
    token = ear.sign_handoff(inspection=claims, networks=networks, private_key=key, kid=kid, now=now or clock.now())
    return AttestationResult.objects.create(
        node_id=node_id,
        kind=ResultKind.HANDOFF,
        nonce=inspection.nonce,
        affirming=inspection.affirming,
        failures=inspection.failures,
        measurements=inspection.measurements,
        gpu_evidence=inspection.gpu_evidence,
        policy=inspection.policy,
        kid=kid,
        token=token,
    )


def summary(verdict: verifier.Verdict) -> str:
    """The failures in one line, for the quarantine reason and the audit log."""
    if verdict.affirming:
        return "evidence affirmed"
    return "; ".join(f"{f.code} {f.component}: expected {f.expected}, found {f.found}" for f in verdict.failures)


# -- imports -------------------------------------------------------------------------------


def retire_releases(releases: Collection[str]) -> int:
    """Retire releases, every component's digests of them: a node that still boots one fails its
    next attestation, release_retired. Returns how many releases were in service before."""
    rows = ReferenceValue.objects.filter(release__in=releases, retired_at__isnull=True)
    retiring = set(rows.values_list("release", flat=True))
    rows.update(retired_at=Now())
    return len(retiring)


def return_releases_to_service(releases: Collection[str]) -> int:
    """Undo a retirement. Returns how many releases were retired before."""
    rows = ReferenceValue.objects.filter(release__in=releases, retired_at__isnull=False)
    returning = set(rows.values_list("release", flat=True))
    rows.update(retired_at=None)
    return len(returning)


@transaction.atomic
def import_reference_manifest(document: object) -> int:
    """Add a release manifest's golden digests (reference.ManifestError if malformed); returns how many were new."""
    entries = reference.parse_manifest(document)
    before = ReferenceValue.objects.count()
    ReferenceValue.objects.bulk_create(
        (ReferenceValue(release=e.release, component=e.component, digest=e.digest.lower()) for e in entries),
        ignore_conflicts=True,
    )
    return ReferenceValue.objects.count() - before


@transaction.atomic
def import_trust_anchors(roots: dict) -> list[str]:
    """Install the manufacturer CA and GPU vendor root (PEM), and NVIDIA's roots where the document
    has them, replacing older ones. Returns the roles installed."""
    if not isinstance(roots, dict):
        raise ValueError("trust anchors must be an object of PEM certificates by role")
    valid_at = clock.now()
    verifier.TrustedRoots.from_pem(
        manufacturer_ca=roots.get(TrustAnchorRole.MANUFACTURER_CA),
        gpu_vendor_root=roots.get(TrustAnchorRole.GPU_VENDOR_ROOT),
        valid_at=valid_at,
    )  # refuses every anchor no chain could end at before a row changes
    installing = [role for role in TrustAnchorRole.values if role in REQUIRED_ROLES or role in roots]
    for role in installing:
        verifier.load_trust_anchor(role, roots[role], valid_at=valid_at)
    for role in installing:
        TrustAnchor.objects.update_or_create(role=role, defaults={"pem": roots[role]})
    return installing


def node_exists(name: str) -> bool:
    """Whether a node of that name is enrolled, asked of the model the results refer to."""
    return AttestationResult.node.field.related_model._default_manager.filter(name=name).exists()


def latest_result(node_name: str) -> AttestationResult | None:
    return AttestationResult.objects.filter(node__name=node_name).first()
