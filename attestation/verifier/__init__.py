"""Evidence -> verdict: the fail-closed attestation verifier (pure: no Django, no clock, no I/O of
its own; the GPUs' revocation check and RIM lookup are the caller's).

The evidence is the in-band agent's answer (bmcsim/evidence.py documents it): a TPM 2.0 quote
signed by the node's attestation key (AK), the measured-boot event log, one signed report per GPU
in bmcsim's format, and each GPU's SPDM evidence (its signed measurements in NVIDIA's layout,
`gpu_spdm`); the caller adds the GPUs' SPDM evidence read through the node's BMC where the policy
asks for it. `verify` checks every part and reports every failure, never only the first; a verdict
affirms only when there is no failure at all. The caller makes the nonce with `new_nonce(now)`:
it carries its issue time, which is how `verify` knows the evidence's age. Anything that cannot
be parsed is a `malformed` failure: no evidence makes `verify` raise, and nothing malformed ever
affirms.

Failure codes, one per check (stable: stored, signed into results, shown to operators):

- `malformed`: a part of the evidence is missing, of the wrong type, badly encoded or too big.
- `stale`: the nonce (from `new_nonce`) was issued longer ago than the policy allows, or
  carries no issue time at all.
- `ak_chain`: the AK certificate does not chain to the manufacturer CA, is not valid now, or is
  not a signing end-entity certificate.
- `ak_identity`: the AK certificate names another node (CN = name, serialNumber = serial).
- `quote_format`: the quote is not a TPMS_ATTEST of type TPM_ST_ATTEST_QUOTE with the TPM's
  magic, exactly as long as its fields.
- `quote_signature`: the AK's signature over the quote does not verify.
- `nonce_mismatch`: the quote's extraData is not the nonce.
- `pcr_selection`: the quote does not cover exactly the policy's PCRs of the SHA-256 bank.
- `unexpected_event`: an event names a component the policy does not measure, or sits in a PCR
  other than the one the policy assigns to that component.
- `missing_component`: a boot component the policy requires was not measured.
- `pcr_digest`: replaying the event log (`PCR = SHA256(PCR || digest)`) does not give the
  quote's PCR digest.
- `unknown_component_digest`: a measured boot component's digest is not in the reference values.
- `secure_boot_off`: the policy requires Secure Boot (`boot.secure_boot_required`) and PCR 7's
  events lack the SecureBoot variable measured enabled (found: "Disabled", or "not measured").
- `gpu_chain`: a GPU's certificate chain does not end at the GPU-vendor root, or is not valid now.
- `gpu_identity`: a GPU's device certificate names another GPU than the one enrolled at its index.
- `gpu_signature`: a GPU report's signature does not verify.
- `gpu_nonce`: a GPU report does not carry the nonce.
- `gpu_measurement`: a GPU measurement is missing, unexpected, or not in the reference values.
- `release_retired`: a boot component or GPU measurement is a release operators retired.
- `release_not_pinned`: it is a known release, but not one of those the node's class is pinned to
  (its firmware baseline's boot releases).
- `cc_mode`: a GPU reports another confidential-computing mode than the policy demands.
- `gpu_inventory`: the reported GPUs are not exactly the node's enrolled GPUs.
- `gpu_evidence`: a GPU's SPDM evidence that the policy requires (`gpu.evidence`: in band from
  the agent's `gpu_spdm`, out of band from the BMC) is absent, or the GPU said why it has none.
- `gpu_rim`: no imported RIM (or several) for the driver or VBIOS release a GPU's SPDM evidence
  reports, or one that is not signed under NVIDIA's RIM root and valid at the evidence's time.
- `gpu_revocation`: a certificate of a GPU's device chain, or of a used RIM's signing chain, is
  not known unrevoked by an OCSP answer as fresh as the policy allows.
- `verifier_error`: the verifier itself failed (a bug); the verdict fails closed.

The checks, a module a concern: `appraisal` (`verify`, every check in turn), `tpm_quote`,
`event_log`, `gpu_reports`, `gpu_evidence` (SPDM evidence end to end: `spdm`, `gpu_rims`,
`revocation`), `chains` and `anchors` (the trust anchors chains end at), on
`fields` (the evidence's bounds and field parsers), `nonces`, `identities` and `verdict`.
Callers import the names below from here.
"""

from attestation.verifier.anchors import TrustedRoots, UnusableAnchor, load_trust_anchor
from attestation.verifier.appraisal import verify
from attestation.verifier.event_log import SECURE_BOOT_MEASURED
from attestation.verifier.identities import GPUIdentity, NodeIdentity
from attestation.verifier.nonces import new_nonce
from attestation.verifier.tpm_quote import verify_quote
from attestation.verifier.verdict import FAILURE_CODES, Failure, GpuEvidence, Verdict

__all__ = [
    "FAILURE_CODES",
    "SECURE_BOOT_MEASURED",
    "Failure",
    "GPUIdentity",
    "GpuEvidence",
    "NodeIdentity",
    "TrustedRoots",
    "UnusableAnchor",
    "Verdict",
    "load_trust_anchor",
    "new_nonce",
    "verify",
    "verify_quote",
]
