"""bmcsim's own API under /bmcsim/v1: inventory (with the fabric), trust roots, reference values,
firmware releases, the GPUs' signed RIMs, the OCSP responder of the GPU chains' CAs (ocsp.py),
faults of nodes and switches, sample OS images, what each node's BMC fetched into its virtual
media and what its last boot measured.

This is the data-center side of the simulation (what an inventory system and a lab bench
give), so it needs no credentials. Errors are JSON {"detail": ...}.
"""

from __future__ import annotations

import base64
import functools
import json

from aiohttp import web

from agent.app import detail
from core.topology import ETHERNET, INFINIBAND, NVLINK, NetworkPorts, fabric_levels

from . import evidence, fabric_apis, faults, gpu_rims, images, ocsp, releases, state
from .sim import SIM, Simulator


@functools.cache
def inventory(sim: Simulator) -> bytes:
    """The fleet as a data-center inventory hands it over, with its fabric's levels, each node's
    domain at every level and its ports on the fabrics that keep tenants apart, the fabric's
    switches and where each fabric's managers answer (a template per switch, pod or NVLink domain);
    it never changes, so it is built once."""
    base = sim.settings.base_url
    specs = [node.spec for node in sim.fleet.nodes.values()]
    nodes = [
        {
            "name": spec.name,
            "pod": spec.pod,
            "rack": spec.rack,
            "position": spec.position,
            "serial": spec.serial,
            "redfish_url": base,
            "system_id": spec.name,
            "credentials": {"username": spec.bmc_username, "password": spec.bmc_password},
            "agent_url": f"{base}/agent/{spec.name}",
            "macs": state.macs(spec.name),
            "gpus": [{"index": g.index, "uuid": g.uuid, "serial": g.serial, "model": g.model} for g in spec.gpus],
            "fabric": dict(spec.fabric),
            "network": _network(sim.fleet.fabric.ports[spec.name]),
        }
        for spec in specs
    ]
    switches = [
        {"name": s.spec.name, "kind": s.spec.kind, "level": s.spec.level, "domain": s.spec.domain}
        for s in sim.fleet.switches.values()
    ]
    return json.dumps(
        {
            "fabric_levels": fabric_levels(specs),
            "nodes": nodes,
            "switches": switches,
            "fabric_managers": {fabric: f"{base}{prefix}" for fabric, prefix in fabric_apis.PREFIXES.items()},
        }
    ).encode()


def _network(ports: NetworkPorts) -> dict:
    """Where the node plugs into each fabric, as the control plane finds its ports on the managers."""
    return {
        ETHERNET: {"switch": ports.ethernet_switch, "port": ports.ethernet_port},
        INFINIBAND: {"fabric": ports.infiniband_fabric, "guids": list(ports.hca_guids)},
        NVLINK: {"domain": ports.nvlink_domain},
        "provisioning_address": ports.provisioning_address,
        "management_address": ports.management_address,
    }


async def get_inventory(request: web.Request) -> web.Response:
    return web.Response(body=inventory(request.app[SIM]), content_type="application/json")


async def get_roots(request: web.Request) -> web.Response:
    """{role: PEM} of every root, as manage.py import_trust_anchors installs them (pki.PKI.roots)."""
    return web.json_response(request.app[SIM].pki.roots())


async def post_ocsp(request: web.Request) -> web.Response:
    if request.content_type != ocsp.REQUEST_CONTENT_TYPE:
        return detail(415, f"the body must be {ocsp.REQUEST_CONTENT_TYPE}")
    return _ocsp_answer(request, await request.read())


async def get_ocsp(request: web.Request) -> web.Response:
    try:
        der = base64.b64decode(request.match_info["request"], validate=True)
    except ValueError:
        der = b""  # not base64: answered as the malformed request it is
    return _ocsp_answer(request, der)


def _ocsp_answer(request: web.Request, der: bytes) -> web.Response:
    sim = request.app[SIM]
    return web.Response(body=ocsp.answer(sim.pki, der, sim.now()), content_type=ocsp.CONTENT_TYPE)


async def get_gpu_rims(request: web.Request) -> web.Response:
    base = request.app[SIM].settings.base_url
    rims = [{"rim_id": rim_id, "url": f"{base}/bmcsim/v1/gpu-rims/{rim_id}"} for rim_id in gpu_rims.catalogue()]
    return web.json_response({"rims": rims})


async def get_gpu_rim(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    xml = gpu_rims.document(sim.pki, sim.settings.data_dir, request.match_info["rim_id"])
    if xml is None:
        return detail(404, f"no GPU RIM {request.match_info['rim_id']!r}")
    return web.Response(body=xml, content_type="application/xml")


async def get_reference_values(request: web.Request) -> web.Response:
    return web.json_response(releases.reference_values(request.app[SIM].settings.quoted_pcrs))


async def get_firmware_releases(request: web.Request) -> web.Response:
    return web.json_response(releases.firmware_reference())


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response({"faults": faults.listing(request.app[SIM].fleet)})


async def post_fault(request: web.Request) -> web.Response:
    try:
        payload = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return detail(400, "body must be a JSON object")
    try:
        fault = faults.inject(request.app[SIM].fleet, payload, request.app[SIM].now())
    except faults.FaultError as err:
        return detail(err.status, err.detail)
    return web.json_response(fault, status=201)


async def delete_faults(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    try:
        query = request.query
        cleared = faults.clear(sim.fleet, query.get("node"), query.get("switch"), query.get("fabric"))
    except faults.FaultError as err:
        return detail(err.status, err.detail)
    sim.faults_cleared()
    return web.json_response({"cleared": cleared})


async def get_images(request: web.Request) -> web.Response:
    return web.json_response({"images": images.listing(request.app[SIM].settings.base_url)})


async def get_image_file(request: web.Request) -> web.Response:
    image = images.by_file(request.match_info["file"])
    if image is None:
        return detail(404, f"no image named {request.match_info['file']!r}")
    return web.Response(body=images.image_bytes(image), content_type="application/octet-stream")


async def get_node_media(request: web.Request) -> web.Response:
    """Every virtual media slot of a node as its BMC holds it: the image URL and what fetching it gave
    (sha256 and size, a config drive's documents) or why it failed."""
    node = request.app[SIM].fleet.nodes.get(request.match_info["node"])
    if node is None:
        return detail(404, f"no node named {request.match_info['node']!r}")
    return web.json_response({"node": node.name, "media": {slot: node.media.get(slot) for slot in state.MEDIA_SLOTS}})


async def get_node_power(request: web.Request) -> web.Response:
    """A node's power as its BMC sees it, with how often it booted and when it was last reset."""
    sim = request.app[SIM]
    node = sim.fleet.nodes.get(request.match_info["node"])
    if node is None:
        return detail(404, f"no node named {request.match_info['node']!r}")
    return web.json_response(
        {
            "node": node.name,
            "power_state": node.power_state(sim.now()),
            "boot_count": node.boot_count,
            "last_reset_at": node.last_reset_at,
        }
    )


async def get_node_event_log(request: web.Request) -> web.Response:
    """Every event the node's last boot measured, in every PCR, PCR 7's Secure Boot state among
    them; the agent's evidence gives only those of the quoted PCRs."""
    node = request.app[SIM].fleet.nodes.get(request.match_info["node"])
    if node is None:
        return detail(404, f"no node named {request.match_info['node']!r}")
    return web.json_response({"node": node.name, "event_log": evidence.event_log(node, pcrs=None)})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/bmcsim/v1/inventory", get_inventory, allow_head=False)
    router.add_get("/bmcsim/v1/roots", get_roots, allow_head=False)
    router.add_post("/bmcsim/v1/ocsp", post_ocsp)
    router.add_get("/bmcsim/v1/ocsp/{request:.+}", get_ocsp, allow_head=False)
    router.add_get("/bmcsim/v1/gpu-rims", get_gpu_rims, allow_head=False)
    router.add_get("/bmcsim/v1/gpu-rims/{rim_id}", get_gpu_rim, allow_head=False)
    router.add_get("/bmcsim/v1/reference-values", get_reference_values, allow_head=False)
    router.add_get("/bmcsim/v1/firmware-releases", get_firmware_releases, allow_head=False)
    router.add_get("/bmcsim/v1/faults", get_faults, allow_head=False)
    router.add_post("/bmcsim/v1/faults", post_fault)
    router.add_delete("/bmcsim/v1/faults", delete_faults)
    router.add_get("/bmcsim/v1/images", get_images, allow_head=False)
    router.add_get("/bmcsim/v1/images/{file}", get_image_file)
    router.add_get("/bmcsim/v1/nodes/{node}/media", get_node_media, allow_head=False)
    router.add_get("/bmcsim/v1/nodes/{node}/power", get_node_power, allow_head=False)
    router.add_get("/bmcsim/v1/nodes/{node}/event-log", get_node_event_log, allow_head=False)
