"""The shape of a simulated fleet: pods, racks, nodes and their GPUs.

Pure and deterministic, with no Django import: bmcsim builds its hardware from it and
`manage.py seed_fleet --topology default` enrols the same fleet without asking bmcsim, so
both agree on every name, serial and GPU UUID.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from dataclasses import dataclass, field

DEFAULT_NODE_COUNT = 50
NODES_PER_RACK = 8
GPUS_PER_NODE = 8
DEFAULT_POD_COUNT = 2
GPU_MODEL = "NVIDIA H100 80GB HBM3"
BMC_USERNAME = "admin"

_UUID_NAMESPACE = uuid.UUID("6f1c3c2e-9a43-4c1b-9a51-2f4a4c0d7e10")


@dataclass(frozen=True)
class GPUSpec:
    index: int
    uuid: str
    serial: str
    model: str = GPU_MODEL


@dataclass(frozen=True)
class NodeSpec:
    name: str
    pod: str
    rack: str
    position: int
    serial: str
    bmc_username: str
    bmc_password: str
    gpus: tuple[GPUSpec, ...] = field(default=())


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def node_name(number: int, node_count: int) -> str:
    return f"node-{number:0{max(3, len(str(node_count)))}d}"


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/gpu/{index}')}"


def bmc_password(node: str) -> str:
    return _digest("bmc-password", node)[:20]


def agent_token(node: str) -> str:
    """The bearer token of a simulated node's agent (a real fleet's come from its inventory)."""
    return _digest("agent-token", node)[:32]


def default_layout(
    node_count: int = DEFAULT_NODE_COUNT,
    *,
    nodes_per_rack: int = NODES_PER_RACK,
    pod_count: int = DEFAULT_POD_COUNT,
    gpus_per_node: int = GPUS_PER_NODE,
) -> list[NodeSpec]:
    """Fill racks of `nodes_per_rack` in order; the first pods take the odd rack.

    50 nodes give 7 racks (six of 8 nodes and one of 2): p1 holds r01-r04, p2 r05-r07.
    """
    if node_count < 1:
        raise ValueError("a fleet needs at least one node")
    if nodes_per_rack < 1 or pod_count < 1 or gpus_per_node < 0:
        raise ValueError("nodes per rack and pods must be positive, GPUs per node not negative")
    rack_count = math.ceil(node_count / nodes_per_rack)
    pod_count = min(pod_count, rack_count)
    racks_per_pod = [rack_count // pod_count + (1 if p < rack_count % pod_count else 0) for p in range(pod_count)]
    rack_width = max(2, len(str(rack_count)))
    rack_pods = [f"p{p + 1}" for p, count in enumerate(racks_per_pod) for _ in range(count)]

    nodes = []
    for number in range(1, node_count + 1):
        rack_index, position = divmod(number - 1, nodes_per_rack)
        name = node_name(number, node_count)
        gpus = tuple(
            GPUSpec(index=i, uuid=gpu_uuid(name, i), serial=f"1654{_digest('gpu-serial', name, str(i))[:9].upper()}")
            for i in range(gpus_per_node)
        )
        nodes.append(
            NodeSpec(
                name=name,
                pod=rack_pods[rack_index],
                rack=f"r{rack_index + 1:0{rack_width}d}",
                position=position + 1,
                serial=f"GF{_digest('node-serial', name)[:10].upper()}",
                bmc_username=BMC_USERNAME,
                bmc_password=bmc_password(name),
                gpus=gpus,
            )
        )
    return nodes
