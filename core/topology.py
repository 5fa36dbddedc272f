"""The shape of a simulated fleet: pods, racks, nodes and their GPUs, and the fabric's levels and switches.

Pure and deterministic, with no Django import: bmcsim builds its hardware from it and
`manage.py seed_fleet --topology default` enrols the same fleet without asking bmcsim, so
both agree on every name, serial and GPU UUID.

The fabric is a tree of domains, one level under another, from the pod at the top to the NVLink
domain at the bottom. In the default layout the levels are FABRIC_LEVELS, `pod > leaf >
nvlink_domain`: the NVLink domain is the rack (same name, r01..), and a leaf is `racks_per_leaf`
racks in order within a pod, named `<pod>-leaf<n>` (50 nodes: p1-leaf1 = r01+r02, p1-leaf2 =
r03+r04, p2-leaf1 = r05+r06, p2-leaf2 = r07). With `spine_groups_per_pod` the levels are
SPINE_GROUP_LEVELS, `pod > spine_group > leaf > nvlink_domain`: a pod's leaves are spread in
order over its spine groups, named `<pod>-sg<n>`, the first groups taking one leaf more. Numbers
in names are zero-padded to the widest, as node and rack names are, so names sort in order.
Each node carries its `fabric` path, (level, domain) from the pod down to its rack.

The switches (`fabric_switches`) follow from the nodes' paths: a leaf switch per leaf domain,
named as the leaf, and SPINES_PER_GROUP spine switches per domain of the level above the leaves
(the pod, or the spine group), `<domain>-spine<n>`. A port is named after what its cable
reaches: a leaf switch has a downlink per node (`node-001`) and an uplink per spine of its group
(`p1-spine1`); a spine has one port per leaf of its group (`p1-leaf1`).
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address

DEFAULT_NODE_COUNT = 50
NODES_PER_RACK = 8
GPUS_PER_NODE = 8
DEFAULT_POD_COUNT = 2
GPU_MODEL = "NVIDIA H100 80GB HBM3"
BMC_USERNAME = "admin"

POD, SPINE_GROUP, LEAF, NVLINK_DOMAIN = "pod", "spine_group", "leaf", "nvlink_domain"
FABRIC_LEVELS = (POD, LEAF, NVLINK_DOMAIN)
SPINE_GROUP_LEVELS = (POD, SPINE_GROUP, LEAF, NVLINK_DOMAIN)
RACKS_PER_LEAF = 2
SPINES_PER_GROUP = 2
LEAF_SWITCH, SPINE_SWITCH = "leaf", "spine"

FabricPath = tuple[tuple[str, str], ...]  # (level, domain), from the pod down to the NVLink domain (the rack)

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
    fabric: FabricPath = ()


@dataclass(frozen=True)
class SwitchSpec:
    """One switch of the fabric and the domain it serves: a leaf switch its leaf, a spine the
    domain above the leaves (pod or spine group)."""

    name: str
    kind: str  # LEAF_SWITCH or SPINE_SWITCH
    level: str
    domain: str
    ports: tuple[str, ...]  # each named after what its cable reaches: a node, a spine or a leaf switch


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def node_name(number: int, node_count: int) -> str:
    return f"node-{number:0{max(3, len(str(node_count)))}d}"


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/gpu/{index}')}"


def bmc_password(node: str) -> str:
    return _digest("bmc-password", node)[:20]


def default_layout(
    node_count: int = DEFAULT_NODE_COUNT,
    *,
    nodes_per_rack: int = NODES_PER_RACK,
    pod_count: int = DEFAULT_POD_COUNT,
    gpus_per_node: int = GPUS_PER_NODE,
    racks_per_leaf: int = RACKS_PER_LEAF,
    spine_groups_per_pod: int = 0,
) -> list[NodeSpec]:
    """Fill racks of `nodes_per_rack` in order; the first pods take the odd rack.

    50 nodes give 7 racks (six of 8 nodes and one of 2): p1 holds r01-r04, p2 r05-r07; with
    two racks a leaf, p1-leaf1 and p1-leaf2, p2-leaf1 and p2-leaf2 (r07 alone).
    """
    if node_count < 1:
        raise ValueError("a fleet needs at least one node")
    if nodes_per_rack < 1 or pod_count < 1 or gpus_per_node < 0:
        raise ValueError("nodes per rack and pods must be positive, GPUs per node not negative")
    if racks_per_leaf < 1 or spine_groups_per_pod < 0:
        raise ValueError("racks per leaf must be positive, spine groups per pod not negative")
    rack_count = math.ceil(node_count / nodes_per_rack)
    rack_paths = _rack_paths(rack_count, pod_count, racks_per_leaf, spine_groups_per_pod)

    nodes = []
    for number in range(1, node_count + 1):
        rack_index, position = divmod(number - 1, nodes_per_rack)
        name = node_name(number, node_count)
        gpus = tuple(
            GPUSpec(index=i, uuid=gpu_uuid(name, i), serial=f"1654{_digest('gpu-serial', name, str(i))[:9].upper()}")
            for i in range(gpus_per_node)
        )
        path = rack_paths[rack_index]
        nodes.append(
            NodeSpec(
                name=name,
                pod=path[0][1],
                rack=path[-1][1],
                position=position + 1,
                serial=f"GF{_digest('node-serial', name)[:10].upper()}",
                bmc_username=BMC_USERNAME,
                bmc_password=bmc_password(name),
                gpus=gpus,
                fabric=path,
            )
        )
    return nodes


def _spread(items: int, groups: int) -> list[int]:
    """How many of `items`, in order, each of `groups` (at most one per item) takes: the first take one more."""
    groups = min(groups, items)
    return [items // groups + (1 if g < items % groups else 0) for g in range(groups)]


def _numbered(sizes: list[int]) -> list[int]:
    """[2, 1] -> [0, 0, 1]: the group of each item."""
    return [group for group, size in enumerate(sizes) for _ in range(size)]


def _rack_paths(rack_count: int, pod_count: int, racks_per_leaf: int, spine_groups: int) -> list[FabricPath]:
    """Each rack's fabric path, one tuple per rack that its nodes share."""
    racks_per_pod = _spread(rack_count, pod_count)
    leaves_per_pod = [math.ceil(racks / racks_per_leaf) for racks in racks_per_pod]
    rack_width = max(2, len(str(rack_count)))
    leaf_width = len(str(max(leaves_per_pod)))
    group_width = len(str(min(spine_groups, max(leaves_per_pod))))
    paths: list[FabricPath] = []
    for p, (racks, leaves) in enumerate(zip(racks_per_pod, leaves_per_pod, strict=True)):
        pod = f"p{p + 1}"
        leaf_groups = _numbered(_spread(leaves, spine_groups)) if spine_groups else []
        for r in range(racks):
            leaf = r // racks_per_leaf
            group = ((SPINE_GROUP, f"{pod}-sg{leaf_groups[leaf] + 1:0{group_width}d}"),) if spine_groups else ()
            leaf_domain = (LEAF, f"{pod}-leaf{leaf + 1:0{leaf_width}d}")
            paths.append(((POD, pod), *group, leaf_domain, (NVLINK_DOMAIN, f"r{len(paths) + 1:0{rack_width}d}")))
    return paths


def fabric_levels(nodes: Sequence[NodeSpec]) -> tuple[str, ...]:
    """The fabric's levels, top down: those of the nodes' paths (every node of a layout has the same)."""
    return tuple(level for level, _ in nodes[0].fabric) if nodes else ()


def fabric_switches(nodes: Iterable[NodeSpec]) -> list[SwitchSpec]:
    """The fabric's switches, from the nodes' paths, in the nodes' order: for each domain above
    the leaves, its spines, then its leaf switches. Nodes whose path has no leaf level have none."""
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}  # domain above the leaves -> leaf -> its nodes
    for node in nodes:
        levels = [level for level, _ in node.fabric]
        if LEAF in levels[1:]:
            at = levels.index(LEAF)
            groups.setdefault(node.fabric[at - 1], {}).setdefault(node.fabric[at][1], []).append(node.name)
    switches = []
    for (level, domain), leaves in groups.items():
        spines = tuple(f"{domain}-spine{n}" for n in range(1, SPINES_PER_GROUP + 1))
        switches += [SwitchSpec(spine, SPINE_SWITCH, level, domain, tuple(leaves)) for spine in spines]
        switches += [SwitchSpec(leaf, LEAF_SWITCH, LEAF, leaf, (*members, *spines)) for leaf, members in leaves.items()]
    return switches


# -- where each node plugs into the fabrics that isolate tenants ----------------------------------

ETHERNET, INFINIBAND, NVLINK = "ethernet", "infiniband", "nvlink"
FABRICS = (ETHERNET, INFINIBAND, NVLINK)
PROVISIONING_VLAN = 10  # every leaf port's access VLAN while the node serves no tenant
DEFAULT_PKEY = 0x7FFF  # InfiniBand's default partition: every HCA port a limited member
_PROVISIONING_NETWORK = IPv4Address("172.20.0.0")  # a /14: the provisioning network, one address per node
_MANAGEMENT_NETWORK = IPv4Address("172.24.0.0")  # a /14: the BMCs, out of band
_MELLANOX_GUID_PREFIX = "b8cef603"  # the OUI NVIDIA's ConnectX HCAs carry, as UFM spells GUIDs


@dataclass(frozen=True)
class NetworkPorts:
    """One node's ends on the three fabrics, and its addresses outside any tenant's network."""

    ethernet_switch: str  # the leaf switch that holds its port (its leaf, else its rack's top-of-rack switch)
    ethernet_port: str  # "swpN", as Cumulus Linux names a switch port
    infiniband_fabric: str  # the InfiniBand fabric its HCAs are on (its pod): one UFM each
    hca_guids: tuple[str, ...]  # one HCA port per GPU, 16 hex digits as UFM writes them
    nvlink_domain: str  # its NVLink domain (its rack): one NMX-M each
    provisioning_address: str
    management_address: str


def network_ports(nodes: Sequence[NodeSpec]) -> dict[str, NetworkPorts]:
    """Every node's NetworkPorts, by name: ports numbered in the nodes' order on each leaf switch."""
    on_switch: dict[str, int] = {}
    ports = {}
    for number, node in enumerate(nodes):
        path = dict(node.fabric)
        switch = path.get(LEAF) or f"{node.rack}-tor"
        on_switch[switch] = on_switch.get(switch, 0) + 1
        ports[node.name] = NetworkPorts(
            ethernet_switch=switch,
            ethernet_port=f"swp{on_switch[switch]}",
            infiniband_fabric=node.pod,
            hca_guids=tuple(f"{_MELLANOX_GUID_PREFIX}{number:06x}{i:02x}" for i in range(max(1, len(node.gpus)))),
            nvlink_domain=path.get(NVLINK_DOMAIN, node.rack),
            provisioning_address=str(_PROVISIONING_NETWORK + 16 + number),
            management_address=str(_MANAGEMENT_NETWORK + 16 + number),
        )
    return ports
