"""A Redfish client for one node's BMC, on core/outbound.py; also for the fabric's switch manager
(workflows/fabric_health.py), with that service's URL and credentials in place of a node's.

Why not OpenStack's sushy: the workflows need a handful of calls (power, one-time boot,
virtual media, drive secure erase and firmware updates with task polling, BIOS settings, Secure
Boot, the system event log) with our own retry policy and errors
that name the node and the call; sushy brings a resource model and its own retry and error
handling for all of Redfish. The tests drive this client against OpenStack's sushy-tools
emulator as well as bmcsim, so it speaks Redfish as others do.

- errors: what a call fails with, transient or permanent, naming the node and the call;
- transport: HTTP to one BMC, its credentials kept to it, with retries and timeouts, and a
  collection's members read inline (`$expand`) where the BMC advertises it, else one by one;
- client: the calls the workflows make, and `read_each` for many BMCs at once;
- component_integrity: the GPUs' SPDM evidence out of band.

Callers import the names below from here.
"""

from workflows.redfish.client import (
    RESET_FORCE_OFF,
    RESET_FORCE_RESTART,
    RESET_GRACEFUL_RESTART,
    RESET_ON,
    RESET_POWER_CYCLE,
    LogEntries,
    RedfishClient,
    read_each,
)
from workflows.redfish.errors import BMCPermanentError, BMCTransientError, RedfishError
from workflows.redfish.transport import BMCAccess

__all__ = [
    "RESET_FORCE_OFF",
    "RESET_FORCE_RESTART",
    "RESET_GRACEFUL_RESTART",
    "RESET_ON",
    "RESET_POWER_CYCLE",
    "BMCAccess",
    "BMCPermanentError",
    "BMCTransientError",
    "LogEntries",
    "RedfishClient",
    "RedfishError",
    "read_each",
]
