"""The fleet's tables, a module a subject:

- topology: pods, the fabric's levels, domains and switches, racks;
- nodes: nodes, their GPUs and the append-only audit log, with the lifecycle's invariants as
  CHECK constraints;
- idle_diagnostics: long diagnostics runs on idle nodes;
- images, addresses, config_drives: what a tenant's node is given (an OS image from the
  catalogue, an address from its pod's pool, a config drive; the service image gets a drive too);
- node_credentials: the agent credentials of each boot of the service image and each tenancy;
- networks: the segments each fabric hands tenants, each reservation's networks, each node's place
  on every fabric and its private address;
- power_actions: tenants' reboots and power cycles, kept as due work;
- baselines and rollouts: the firmware every node of a class must run, and its rollouts.

Callers, Django's app registry among them, import the names below from here.
"""

from fleet.models.addresses import AddressPool, NodeAddress
from fleet.models.baselines import FirmwareBaseline, FirmwareBaselineComponent
from fleet.models.config_drives import ConfigDrive
from fleet.models.idle_diagnostics import IdleDiagnosticRun, IdleDiagnosticStatus
from fleet.models.images import Image
from fleet.models.networks import (
    Fabric,
    NetworkAttachment,
    PrivateAddress,
    SegmentKind,
    SegmentPool,
    TenantNetwork,
)
from fleet.models.node_credentials import CredentialHolder, NodeCredential
from fleet.models.nodes import GPU, AuditEvent, AuditOnlyEvent, Node, NodeState
from fleet.models.power_actions import PowerAction, PowerActionKind, PowerActionState
from fleet.models.rollouts import FirmwareRollout, FirmwareRolloutNode
from fleet.models.topology import SWITCH_IN_TROUBLE, FabricDomain, FabricLevel, FabricSwitch, Pod, Rack

__all__ = [
    "GPU",
    "SWITCH_IN_TROUBLE",
    "AddressPool",
    "AuditEvent",
    "AuditOnlyEvent",
    "ConfigDrive",
    "CredentialHolder",
    "Fabric",
    "FabricDomain",
    "FabricLevel",
    "FabricSwitch",
    "FirmwareBaseline",
    "FirmwareBaselineComponent",
    "FirmwareRollout",
    "FirmwareRolloutNode",
    "IdleDiagnosticRun",
    "IdleDiagnosticStatus",
    "Image",
    "NetworkAttachment",
    "Node",
    "NodeAddress",
    "NodeCredential",
    "NodeState",
    "Pod",
    "PowerAction",
    "PowerActionKind",
    "PowerActionState",
    "PrivateAddress",
    "Rack",
    "SegmentKind",
    "SegmentPool",
    "TenantNetwork",
]
