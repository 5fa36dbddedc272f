"""The clients of a node's hardware that the workflows drive: its BMC (Redfish) and its in-band
agent. A workflow takes a `Clients`, which makes each for a node, so that a test hands it fakes;
the running system uses `HARDWARE`, whose clients speak to the node's own BMC and agent with the
node's credentials (workflows/redfish/, workflows/agent.py): the BMC's from the inventory, the
agent's those of the node's current boot or tenancy (fleet/services/credentials.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings

from core import outbound
from fleet import selectors
from fleet.models import Node
from workflows.agent import AgentClient, AgentUnavailable
from workflows.redfish import BMCAccess, LogEntries, RedfishClient


class BMC(Protocol):
    """What the workflows ask of a node's BMC; RedfishClient answers it."""

    calls: int  # requests made, retries included
    seconds: float  # time spent waiting on them

    @property
    def system_path(self) -> str: ...
    def power_state(self) -> str: ...
    def reset(self, reset_type: str) -> None: ...
    def last_reset_time(self) -> str | None: ...
    def insert_media(self, image_url: str, *, removable: bool = False) -> str: ...
    def set_boot_override(self, target: str, enabled: str = "Once") -> None: ...
    def drives(self) -> list[str]: ...
    def secure_erase(self, drive: str) -> str | None: ...
    def task_status(self, monitor: str) -> tuple[bool, str]: ...
    def firmware_inventory(self) -> list[dict]: ...
    def simple_update(self, image_uri: str, target: str) -> str | None: ...
    def bios_and_secure_boot(self) -> tuple[dict, dict]: ...
    def set_bios_settings(self, attributes: dict) -> None: ...
    def secure_boot(self) -> dict: ...
    def enable_secure_boot(self) -> None: ...
    def managers(self) -> list[str]: ...
    def console_log(self, lines: int, *, since: datetime) -> list[str] | None: ...
    def clear_console_log(self) -> bool: ...
    def event_log_entries_path(self) -> str | None: ...
    def log_entries(self, path: str, *, skip: int, top: int, etag: str = "") -> LogEntries | None: ...
    def gpu_spdm_evidence(self, nonce: bytes) -> list[dict]: ...
    def close(self) -> None: ...


class Agent(Protocol):
    """What the workflows ask of a node's in-band agent; AgentClient answers it."""

    calls: int
    seconds: float

    def inventory(self) -> dict: ...
    def evidence(self, nonce: bytes) -> dict: ...
    def start_gpu_wipe(self) -> dict: ...
    def gpu_wipe_state(self) -> str: ...
    def start_diagnostics(self, level: int) -> dict: ...
    def diagnostics(self) -> dict: ...
    def cancel_diagnostics(self) -> dict: ...
    def start_gpu_reset(self, index: int) -> dict: ...
    def gpu_reset(self) -> dict: ...
    def gpu_healthy(self, index: int | None) -> bool: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Clients:
    bmc: Callable[[Node], BMC]
    agent: Callable[[Node], Agent]


def bmc_client(node: Node) -> RedfishClient:
    """A Redfish client for the node's BMC, with its credentials."""
    access = BMCAccess(node.name, node.redfish_url, node.system_id, node.bmc_username, node.bmc_password)
    return RedfishClient(access, timeout=settings.BMC_TIMEOUT, expand=settings.BMC_EXPAND)


class AgentRefusedCredentials(AgentUnavailable):
    """The agent answers, but not to the credentials of the node's current boot or tenancy: what
    runs there did not boot with them (an earlier boot's OS still running, or a drive its BMC could
    not fetch). No agent of ours, as far as the control plane can tell."""


class CurrentCredentialAgentClient(AgentClient):
    """An AgentClient that presents, at each call, the agent token of the credential of what the
    node runs now (fleet.selectors.agent_token): a boot mid-workflow mints a new one, and a client
    made before it must speak with the one after. One indexed read a call, no secret kept."""

    def __init__(self, node: Node):
        super().__init__(node.name, node.agent_url, "", timeout=settings.BMC_TIMEOUT)
        self.node_id = node.pk

    def _request(self, method: str, path: str, json: dict | None = None) -> outbound.Answer:
        self.headers = {"Authorization": f"Bearer {selectors.agent_token(node_id=self.node_id)}"}
        answer = super()._request(method, path, json)
        if answer.status_code == 401:
            raise AgentRefusedCredentials(f"{self.node}: agent {path}: refuses the credentials of this boot")
        return answer


def agent_client(node: Node) -> AgentClient:
    """A client for the node's in-band agent, with the credential of its current boot or tenancy."""
    return CurrentCredentialAgentClient(node)


HARDWARE = Clients(bmc=bmc_client, agent=agent_client)
