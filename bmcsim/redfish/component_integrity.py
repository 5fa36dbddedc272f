"""ComponentIntegrity: each GPU's SPDM identity and signed measurements, out of band, as NVIDIA's
HGX BMCs serve them.

`/redfish/v1/ComponentIntegrity/{node}-GPU{i}` (ComponentIntegrityType SPDM, TargetComponentURI
the GPU's Processor) links its responder's certificate chain, served as the Processor's
`Certificates/CertChain` (PEMchain: leaf, provisioner CA; the root is `nvidia_device_root` of
GET /bmcsim/v1/roots).
`Actions/ComponentIntegrity.SPDMGetSignedMeasurements` {"Nonce"? (32 bytes, hex), "SlotId"? (0),
"MeasurementIndices"? ([255], all; or one index 1..64)} answers 200 with `SignedMeasurements`
(base64 of bmcsim.spdm's request and signed response), `Version`, `HashingAlgorithm`,
`SigningAlgorithm` and `Certificate`. A node's BMC credential reaches its own GPUs only.
"""

from __future__ import annotations

import base64
import json
import os
import re

from aiohttp import web
from cryptography import x509

from .. import spdm
from ..sim import SIM, Simulator
from ..state import NodeState
from .access import check_bmc, node_scoped, visible_nodes
from .errors import RedfishError, not_found, read_json, reply
from .schema import OK, collection, iso, odata_type, ref

ACTION = "ComponentIntegrity.SPDMGetSignedMeasurements"
COLLECTION = "/redfish/v1/ComponentIntegrity"
MEMBER_ID = re.compile(r"(?P<node>.+)-GPU(?P<gpu>\d{1,2})")
NONCE = re.compile(r"[0-9a-fA-F]{64}")
SLOT = 0  # the one certificate slot the GPUs provision


def _processor(node: NodeState, gpu: int) -> str:
    return f"/redfish/v1/Systems/{node.name}/Processors/GPU{gpu}"


def _certificate(node: NodeState, gpu: int) -> str:
    return f"{_processor(node, gpu)}/Certificates/CertChain"


def integrity_body(node: NodeState, gpu: int) -> dict:
    identity = f"{node.name}-GPU{gpu}"
    path = f"{COLLECTION}/{identity}"
    return {
        "@odata.type": odata_type("ComponentIntegrity"),
        "@odata.id": path,
        "Id": identity,
        "Name": f"{node.name} GPU{gpu} SPDM responder",
        "ComponentIntegrityType": "SPDM",
        "ComponentIntegrityTypeVersion": "1.1.0",
        "ComponentIntegrityEnabled": True,
        "TargetComponentURI": _processor(node, gpu),
        "Status": OK,
        "SPDM": {
            "Requester": ref(f"/redfish/v1/Managers/{node.name}"),
            "IdentityAuthentication": {
                "ResponderAuthentication": {"ComponentCertificate": ref(_certificate(node, gpu))}
            },
        },
        "Links": {"ComponentsProtected": [ref(_processor(node, gpu))]},
        "Actions": {f"#{ACTION}": {"target": f"{path}/Actions/{ACTION}"}},
    }


def _name_of(name: x509.Name) -> dict:
    attributes = {"CommonName": x509.NameOID.COMMON_NAME, "Organization": x509.NameOID.ORGANIZATION_NAME}
    return {
        key: name.get_attributes_for_oid(oid)[0].value
        for key, oid in attributes.items()
        if name.get_attributes_for_oid(oid)
    }


def _hex_bytes(number: int) -> str:
    """A certificate's serial number as the schema writes it: hex bytes separated by colons."""
    return ":".join(f"{byte:02x}" for byte in number.to_bytes((number.bit_length() + 7) // 8 or 1, "big"))


def certificate_body(node: NodeState, gpu: int, chain: list[str]) -> dict:
    leaf = x509.load_pem_x509_certificate(chain[0].encode())
    return {
        "@odata.type": odata_type("Certificate"),
        "@odata.id": _certificate(node, gpu),
        "Id": "CertChain",
        "Name": f"{node.name} GPU{gpu} SPDM certificate chain",
        "CertificateString": "".join(chain),
        "CertificateType": "PEMchain",
        "CertificateUsageTypes": ["Device"],
        "Subject": _name_of(leaf.subject),
        "Issuer": _name_of(leaf.issuer),
        "SerialNumber": _hex_bytes(leaf.serial_number),
        "ValidNotBefore": iso(leaf.not_valid_before_utc.timestamp()),
        "ValidNotAfter": iso(leaf.not_valid_after_utc.timestamp()),
        "SPDM": {"SlotId": SLOT},
    }


def _find(request: web.Request, identity: str) -> tuple[NodeState, int] | None:
    match = MEMBER_ID.fullmatch(identity)
    node = request.app[SIM].fleet.nodes.get(match["node"]) if match else None
    if node is None or match is None or not int(match["gpu"]) < len(node.spec.gpus):
        return None
    return node, int(match["gpu"])


async def _member(request: web.Request) -> tuple[NodeState, int]:
    found = _find(request, request.match_info["member"])
    if found is None:
        raise not_found(request.path)
    await check_bmc(request, found[0])
    return found


async def get_collection(request: web.Request) -> web.Response:
    fleet = request.app[SIM].fleet
    members = [
        f"{COLLECTION}/{name}-GPU{gpu.index}" for name in visible_nodes(request) for gpu in fleet.nodes[name].spec.gpus
    ]
    return reply(collection("ComponentIntegrityCollection", COLLECTION, "Component Integrity Collection", members))


async def get_member(request: web.Request) -> web.Response:
    return reply(integrity_body(*await _member(request)))


def _gpu_of(request: web.Request, node: NodeState) -> int:
    processor = request.match_info["processor"]
    gpu = next((g.index for g in node.spec.gpus if f"GPU{g.index}" == processor), None)
    if gpu is None:
        raise not_found(request.path)
    return gpu


@node_scoped
async def get_certificates(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    gpu = _gpu_of(request, node)
    path = f"{_processor(node, gpu)}/Certificates"
    return reply(collection("CertificateCollection", path, "Certificate Collection", [_certificate(node, gpu)]))


@node_scoped
async def get_certificate(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    gpu = _gpu_of(request, node)
    if request.match_info["certificate"] != "CertChain":
        raise not_found(request.path)
    return reply(certificate_body(node, gpu, spdm.identity(node, gpu, sim.pki)[1]))


def _bad(parameter: str, value: object, why: str) -> RedfishError:
    shown = json.dumps(value)
    return RedfishError(
        400,
        "ActionParameterValueError",
        f"The value {shown} for the parameter {parameter} in the action {ACTION} is invalid: {why}.",
        shown,
        parameter,
        ACTION,
    )


def _parameters(body: dict) -> tuple[bytes, int, int]:
    nonce = body.get("Nonce")
    if nonce is not None and not (isinstance(nonce, str) and NONCE.fullmatch(nonce)):
        raise _bad("Nonce", nonce, "it must be 32 bytes, hex-encoded")
    slot = body.get("SlotId", SLOT)
    if slot != SLOT or isinstance(slot, bool):
        raise _bad("SlotId", slot, f"the GPU has a certificate in slot {SLOT} only")
    indices = body.get("MeasurementIndices", [spdm.ALL_MEASUREMENTS])
    valid = [spdm.ALL_MEASUREMENTS, *spdm.BLOCKS]
    if not (isinstance(indices, list) and len(indices) == 1 and indices[0] in valid and type(indices[0]) is int):
        raise _bad("MeasurementIndices", indices, "the GPU signs one block (1 to 64) or all of them ([255])")
    return bytes.fromhex(nonce) if nonce else os.urandom(spdm.NONCE_BYTES), slot, indices[0]


async def get_signed_measurements(request: web.Request) -> web.Response:
    node, gpu = await _member(request)
    nonce, slot, index = _parameters(await read_json(request, empty_ok=True))
    sim = request.app[SIM]
    report = spdm.signed_measurements(node, gpu, sim.pki, nonce, slot, index, sim.now())
    return reply(
        {
            "SignedMeasurements": base64.b64encode(report).decode(),
            "Version": "1.1",
            "HashingAlgorithm": "TPM_ALG_SHA_384",
            "SigningAlgorithm": "TPM_ALG_ECDSA_ECC_NIST_P384",
            "Certificate": ref(_certificate(node, gpu)),
        }
    )


ROUTES = [
    ("GET", COLLECTION, get_collection),
    ("GET", f"{COLLECTION}/{{member}}", get_member),
    ("POST", f"{COLLECTION}/{{member}}/Actions/{ACTION}", get_signed_measurements),
    ("GET", "/redfish/v1/Systems/{node}/Processors/{processor}/Certificates", get_certificates),
    ("GET", "/redfish/v1/Systems/{node}/Processors/{processor}/Certificates/{certificate}", get_certificate),
]
