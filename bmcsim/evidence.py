"""Attestation evidence of one node, bound to a verifier's nonce.

POST {agent_url}/evidence {"nonce": hex} returns::

    {"quote": {"attest": b64 TPMS_ATTEST, "signature": b64, "ak_cert": PEM},
     "event_log": [{"pcr", "digest", "component", "description"}, ...],
     "gpus": [{"index", "uuid", "nonce", "measurements": {"vbios", "driver"}, "cc_mode",
               "signature", "cert_chain": [device PEM, vendor device CA PEM]}, ...],
     "gpu_spdm": [{"index", "uuid", "source": "in_band", "report": b64, "cert_chain": PEM text}
                  or {"index", "uuid", "status": "unavailable", "reason"}, ...]}

- `attest` is a TPM 2.0 TPMS_ATTEST (TPM_ST_ATTEST_QUOTE) whose extraData is the nonce and
  whose pcrDigest is SHA-256 over the SHA-256 bank PCRs 0, 4, 8, 9 concatenated in that order
  (the quoted PCRs, bmcsim's --quoted-pcrs).
- `signature` is an ECDSA P-256 signature, DER-encoded (RFC 3279 Ecdsa-Sig-Value), over
  SHA-256 of the attest bytes, by the attestation key certified in `ak_cert` (issued by the
  manufacturer CA, subject CN = node name, serialNumber = node serial).
- Replaying the event log, `PCR = SHA256(PCR || bytes.fromhex(digest))` from 32 zero bytes per
  PCR, gives the quoted PCR values. The log has the events of the quoted PCRs only, as an agent
  reading the firmware's log does (agent/host/tpm.py): the boot also measures UEFI Secure Boot's
  state into PCR 7 (component `secureboot`, an EV_EFI_VARIABLE_DRIVER_CONFIG event whose digest
  is SHA-256 of the SecureBoot variable's UEFI_VARIABLE_DATA, value 01 enabled or 00 disabled,
  releases.secure_boot_variable), which is in the evidence when PCR 7 is quoted, and always in
  GET /bmcsim/v1/nodes/{node}/event-log.
- A GPU report's `signature` is ECDSA P-384 over SHA-384, DER-encoded then base64, of the
  report's canonical encoding: the report without `signature` and `cert_chain`, as JSON with
  sorted keys, separators (",", ":"), UTF-8 (`canonical_gpu_report`). Its chain ends at the
  GPU-vendor root served by GET /bmcsim/v1/roots. Measurements are SHA-384 hex digests.
- `gpu_spdm` is each GPU's own SPDM evidence in band, as the host backend reads it over NVML
  (agent/host): `report` is the GET_MEASUREMENTS request for every block (slot 0) with the nonce and
  the GPU's signed MEASUREMENTS response, what its BMC serves out of band (spdm.signed_measurements,
  the same responder, so its faults show here too); `cert_chain` is its chain's PEMs concatenated,
  leaf first, then the provisioner CA, ending at `nvidia_device_root` of GET /bmcsim/v1/roots. As
  NVML, each GPU is "unavailable" for a nonce of other than 32 bytes (an SPDM nonce's length),
  reason "nonce_not_32_bytes", and under a cc_mode fault of mode "off", "confidential_computing_off".
"""

from __future__ import annotations

import base64
import json

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from . import releases, spdm, tpm
from .pki import PKI
from .state import NodeState

ALL_PCRS = None

TPM_FIRMWARE_VERSION = 0x0007_0055_0000_0000
DESCRIPTIONS = {
    "firmware": "EV_EFI_PLATFORM_FIRMWARE_BLOB2 {release}",
    "bootloader": "EV_EFI_BOOT_SERVICES_APPLICATION {release}",
    "kernel": "EV_IPL kernel {release}",
    "initrd": "EV_IPL initrd {release}",
    "cmdline": "EV_IPL kernel command line {release}",
}
SECURE_BOOT_DESCRIPTION = "EV_EFI_VARIABLE_DRIVER_CONFIG SecureBoot {value}"
SPDM_SLOT = 0  # the one certificate slot the GPUs provision, the one NVML's report is signed with


def canonical_gpu_report(report: dict) -> bytes:
    unsigned = {k: v for k, v in report.items() if k not in ("signature", "cert_chain")}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def _release_of(component: str, digest: str) -> str:
    for release in releases.BOOT_RELEASES[component]:
        if releases.boot_digest(component, release) == digest:
            return release
    return "unknown image"


def event_log(node: NodeState, pcrs: tuple[int, ...] | None = releases.QUOTED_PCRS) -> list[dict]:
    """The last boot's events in the order firmware extended them: of the PCRs in `pcrs`, or of
    every PCR (ALL_PCRS)."""
    boot = [
        {
            "pcr": releases.PCR_OF[component],
            "digest": digest,
            "component": component,
            "description": DESCRIPTIONS[component].format(release=_release_of(component, digest)),
        }
        for component, digest in node.measured_boot()
    ]
    secure_boot = {
        "pcr": releases.SECURE_BOOT_PCR,
        "digest": node.secure_boot_digest_booted(),
        "component": releases.SECURE_BOOT_COMPONENT,
        "description": SECURE_BOOT_DESCRIPTION.format(
            value="01 (enabled)" if node.boot_secure_boot else "00 (disabled)"
        ),
    }
    log = [boot[0], secure_boot, *boot[1:]]  # firmware, then its Secure Boot state, then what it boots
    return [event for event in log if pcrs is ALL_PCRS or event["pcr"] in pcrs]


def replay(log: list[dict], pcrs: tuple[int, ...] = releases.QUOTED_PCRS) -> dict[int, bytes]:
    values = {i: tpm.ZERO_PCR for i in pcrs}
    for event in log:
        values[event["pcr"]] = tpm.extend(values[event["pcr"]], bytes.fromhex(event["digest"]))
    return values


def collect(node: NodeState, pki: PKI, nonce: bytes, now: float, pcrs: tuple[int, ...] = releases.QUOTED_PCRS) -> dict:
    ak, ak_cert = pki.attestation_key(node.name, node.spec.serial)
    log = event_log(node, pcrs)
    attest = tpm.quote_attest(
        signer_name=tpm.object_name(ak.public_key()),
        nonce=nonce,
        clock_ms=int(max(0.0, now - node.booted_at) * 1000),
        reset_count=node.boot_count,
        restart_count=0,
        firmware_version=TPM_FIRMWARE_VERSION,
        pcrs=replay(log, pcrs),
    )
    signature = ak.sign(attest, ec.ECDSA(hashes.SHA256()))
    return {
        "quote": {
            "attest": base64.b64encode(attest).decode(),
            "signature": base64.b64encode(signature).decode(),
            "ak_cert": ak_cert,
        },
        "event_log": log,
        "gpus": [_gpu_report(node, gpu, pki, nonce, now) for gpu in node.spec.gpus],
        "gpu_spdm": [_gpu_spdm(node, gpu, pki, nonce, now) for gpu in node.spec.gpus],
    }


def _gpu_report(node: NodeState, gpu, pki: PKI, nonce: bytes, now: float) -> dict:
    key, chain = pki.gpu_key(gpu.uuid, gpu.serial)
    report = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "nonce": nonce.hex(),
        "measurements": node.gpu_measurements(gpu.index, now),
        "cc_mode": node.cc_mode,
    }
    signature = key.sign(canonical_gpu_report(report), ec.ECDSA(hashes.SHA384()))
    return {**report, "signature": base64.b64encode(signature).decode(), "cert_chain": list(chain)}


def _gpu_spdm(node: NodeState, gpu, pki: PKI, nonce: bytes, now: float) -> dict:
    which = {"index": gpu.index, "uuid": gpu.uuid}
    # Refused as agent/host/nvml.py's NVML calls refuse them.
    if len(nonce) != spdm.NONCE_BYTES:
        return {**which, "status": "unavailable", "reason": f"nonce_not_{spdm.NONCE_BYTES}_bytes"}
    if node.cc_mode == "off":
        return {**which, "status": "unavailable", "reason": "confidential_computing_off"}
    report = spdm.signed_measurements(node, gpu.index, pki, nonce, SPDM_SLOT, spdm.ALL_MEASUREMENTS, now)
    _, chain = spdm.identity(node, gpu.index, pki)
    return {**which, "source": "in_band", "report": base64.b64encode(report).decode(), "cert_chain": "".join(chain)}
