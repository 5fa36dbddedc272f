"""The GPUs' SPDM evidence through a node's BMC (Redfish ComponentIntegrity), as NVIDIA's HGX BMCs
serve it: RedfishClient.gpu_spdm_evidence. Where the BMC expands, the members, their responder
certificates and the Processors' UUIDs come in two GETs, and one signed measurement a GPU."""

from __future__ import annotations

from collections.abc import Iterable

from workflows.redfish.errors import BMCPermanentError, RedfishError
from workflows.redfish.transport import RedfishTransport, action_target, link

COMPONENT_INTEGRITY = "/redfish/v1/ComponentIntegrity"
SPDM_GET_SIGNED_MEASUREMENTS = "ComponentIntegrity.SPDMGetSignedMeasurements"
SPDM_SLOT = 0  # the slot of the GPU's device identity chain, the one slot NVIDIA's GPUs provision
SPDM_ALL_MEASUREMENTS = 255
# A member's responder certificate lies outside its Links, two levels below the collection.
MEMBER_WITH_CERTIFICATE = 2


def _responder_certificate(member: dict) -> dict | None:
    """A ComponentIntegrity's responder certificate (chain), linked or expanded, if it has one."""
    found: object = member
    for key in ("SPDM", "IdentityAuthentication", "ResponderAuthentication", "ComponentCertificate"):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) and link(found) else None


def gpu_spdm_evidence(client: RedfishTransport, system_path: str, nonce: bytes) -> list[dict]:
    """As RedfishClient.gpu_spdm_evidence says, for the System at `system_path`."""
    members = _component_integrity(client)
    targets = system_path + "/Processors/"
    spdm = [
        (path, member)
        for path, member in members
        if member.get("ComponentIntegrityType") == "SPDM"
        and member.get("ComponentIntegrityEnabled", True) is True
        and isinstance(member.get("TargetComponentURI"), str)
        and member["TargetComponentURI"].startswith(targets)
    ]
    processors = client.inline_members(system_path + "/Processors") if spdm else {}
    return [_spdm_evidence_of(client, path, member, processors, nonce) for path, member in spdm]


def _component_integrity(client: RedfishTransport) -> Iterable[tuple[str, dict]]:
    """The members of the ComponentIntegrity collection; none where the service has none."""
    try:
        return client.read_members(COMPONENT_INTEGRITY, MEMBER_WITH_CERTIFICATE)
    except BMCPermanentError:
        # A service that has the collection links it from its root: a refusal there is its fault.
        if link(client.service_root.get("ComponentIntegrity")) is None:
            return []
        raise


def _spdm_evidence_of(
    client: RedfishTransport, path: str, member: dict, processors: dict[str, dict], nonce: bytes
) -> dict:
    """One GPU's evidence, its Processor read from `processors` (those the BMC inlined) or else by a GET."""
    processor: str = member["TargetComponentURI"]
    entry = {"processor": processor}
    call = f"{SPDM_GET_SIGNED_MEASUREMENTS} {path}"
    try:
        uuid = (processors.get(processor.rstrip("/")) or client.get(processor)).get("UUID")
        if not isinstance(uuid, str) or not uuid:
            raise BMCPermanentError(client.access.node, f"GET {processor}", "the Processor has no UUID")
        entry["uuid"] = uuid
        actions = member.get("Actions")
        target = action_target(actions.get(f"#{SPDM_GET_SIGNED_MEASUREMENTS}") if isinstance(actions, dict) else None)
        if target is None:
            raise BMCPermanentError(client.access.node, call, "the member offers no such action")
        asked = {"Nonce": nonce.hex(), "SlotId": SPDM_SLOT, "MeasurementIndices": [SPDM_ALL_MEASUREMENTS]}
        result = client.action_result(client.request("POST", target, json=asked, call=call), call)
        report = result.get("SignedMeasurements")
        if not isinstance(report, str) or not report:
            raise BMCPermanentError(client.access.node, call, "the answer has no SignedMeasurements")
        certificate = _responder_certificate(member) or result.get("Certificate")
        if not isinstance(certificate, dict) or link(certificate) is None:
            raise BMCPermanentError(client.access.node, call, "no responder certificate is linked")
        chain = client.resolve(certificate).get("CertificateString")
        if not isinstance(chain, str) or not chain:
            raise BMCPermanentError(client.access.node, f"GET {link(certificate)}", "no CertificateString")
    except RedfishError as error:
        return {**entry, "status": "unavailable", "reason": " ".join(str(error).split())}
    return {**entry, "source": "out_of_band", "report": report, "cert_chain": chain}
