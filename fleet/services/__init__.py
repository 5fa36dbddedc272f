"""Writes to the fleet, a module a feature:

- transitions: the only code that changes a node's state (`transition`, `complete`);
- enrolment and access_changes: nodes from an inventory, and how their BMCs are reached;
- addresses, provisioning, images: what a tenant's node is given (an address, an SSH host key,
  a reinstall, the catalogue's images);
- credentials: the agent credentials of each service boot and tenancy, with their config drives;
- power, idle_diagnostics, baselines: tenants' power actions, diagnostics on idle nodes, and
  firmware baselines with each node's check against them.

Callers import the names below from here.
"""

from fleet.services.access_changes import BMC_ACCESS_FIELDS, SECRET_ACCESS_FIELDS, change_bmc_access
from fleet.services.addresses import NoAddressFree, add_address_pool, assign_address
from fleet.services.baselines import record_firmware_check, set_firmware_baselines
from fleet.services.credentials import (
    CredentialRefused,
    NotServing,
    authenticate_report,
    end_service_boot,
    start_service_boot,
    tenancy_drive_token,
)
from fleet.services.enrolment import EnrolmentResult, FabricEndTaken, FabricLevelsChanged, enrol_nodes
from fleet.services.idle_diagnostics import (
    end_idle_diagnostics,
    idle_diagnostics_started,
    open_idle_diagnostics,
    record_diagnostics_pass,
    take_due_idle_diagnostics,
)
from fleet.services.images import import_images
from fleet.services.power import (
    PowerActionRefused,
    TooManyPowerActions,
    audit_power_action,
    finish_power_action,
    request_power_action,
    restart_asked,
    restart_forced,
    take_due_power_actions,
    take_power_action,
)
from fleet.services.provisioning import record_host_key, request_reinstall
from fleet.services.transitions import ConcurrentTransition, complete, start_inspections, transition

__all__ = [
    "BMC_ACCESS_FIELDS",
    "SECRET_ACCESS_FIELDS",
    "ConcurrentTransition",
    "CredentialRefused",
    "EnrolmentResult",
    "FabricEndTaken",
    "FabricLevelsChanged",
    "NoAddressFree",
    "NotServing",
    "PowerActionRefused",
    "TooManyPowerActions",
    "add_address_pool",
    "assign_address",
    "audit_power_action",
    "authenticate_report",
    "change_bmc_access",
    "complete",
    "end_idle_diagnostics",
    "end_service_boot",
    "enrol_nodes",
    "finish_power_action",
    "idle_diagnostics_started",
    "import_images",
    "open_idle_diagnostics",
    "record_diagnostics_pass",
    "record_firmware_check",
    "record_host_key",
    "request_power_action",
    "request_reinstall",
    "restart_asked",
    "restart_forced",
    "set_firmware_baselines",
    "start_inspections",
    "start_service_boot",
    "take_due_idle_diagnostics",
    "take_due_power_actions",
    "take_power_action",
    "tenancy_drive_token",
    "transition",
]
