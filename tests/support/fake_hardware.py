"""A node's BMC and agent in the test process, for workflow tests that hand them in as
`Clients`: the calls every workflow makes, answered as a healthy server would, and written to a
shared log where the order matters. Tests subclass them for the behaviour they are about
(firmware that drifts, diagnostics that fail); the rest of workflows.clients' BMC and Agent,
which no workflow test reaches through the fakes themselves, raises NotImplementedError."""

from __future__ import annotations

from datetime import datetime
from typing import NoReturn

from fleet.models import GPU, Node
from workflows.redfish import LogEntries


def _not_modelled(call: str) -> NoReturn:
    raise NotImplementedError(f"the fake does not model {call}: subclass it in the test that needs it")


class FakeBMC:
    def __init__(self, log: list[str]):
        self.log = log
        self.calls, self.seconds = 0, 0.0
        self.system_path = "/redfish/v1/Systems/1"
        self.spdm_evidence: list[dict] = []  # what gpu_spdm_evidence answers: set it in a test

    def insert_media(self, url: str, *, removable: bool = False) -> str:
        self.log.append("insert_config_drive" if removable else "insert_media")
        return "/redfish/v1/Managers/bmc/VirtualMedia/CD1"

    def set_boot_override(self, target: str, enabled: str = "Once") -> None:
        pass

    def power_state(self) -> str:
        return "On"

    def reset(self, reset_type: str) -> None:
        self.log.append("reset")

    def close(self) -> None:
        pass

    def gpu_spdm_evidence(self, nonce: bytes) -> list[dict]:
        return self.spdm_evidence

    def last_reset_time(self) -> str | None:
        _not_modelled("last_reset_time")

    def drives(self) -> list[str]:
        _not_modelled("drives")

    def secure_erase(self, drive: str) -> str | None:
        _not_modelled("secure_erase")

    def task_status(self, monitor: str) -> tuple[bool, str]:
        _not_modelled("task_status")

    def firmware_inventory(self) -> list[dict]:
        _not_modelled("firmware_inventory")

    def simple_update(self, image_uri: str, target: str) -> str | None:
        _not_modelled("simple_update")

    def bios_attributes(self) -> dict:
        _not_modelled("bios_attributes")

    def bios_and_secure_boot(self) -> tuple[dict, dict]:
        return self.bios_attributes(), self.secure_boot()

    def set_bios_settings(self, attributes: dict) -> None:
        _not_modelled("set_bios_settings")

    def secure_boot(self) -> dict:
        _not_modelled("secure_boot")

    def enable_secure_boot(self) -> None:
        _not_modelled("enable_secure_boot")

    def managers(self) -> list[str]:
        _not_modelled("managers")

    def console_log(self, lines: int, *, since: datetime) -> list[str] | None:
        _not_modelled("console_log")

    def clear_console_log(self) -> bool:
        _not_modelled("clear_console_log")

    def event_log_entries_path(self) -> str | None:
        _not_modelled("event_log_entries_path")

    def log_entries(self, path: str, *, skip: int, top: int, etag: str = "") -> LogEntries | None:
        _not_modelled("log_entries")


class FakeAgent:
    """An agent that answers with the node's enrolled GPUs and no evidence."""

    def __init__(self, node: Node):
        self.gpus = [{"index": g.index, "uuid": g.uuid, "serial": g.serial} for g in GPU.objects.filter(node=node)]
        self.calls, self.seconds = 0, 0.0

    def inventory(self) -> dict:
        return {"gpus": self.gpus, "ssh_host_keys": []}

    def evidence(self, nonce: bytes) -> dict:
        return {}

    def close(self) -> None:
        pass

    def start_gpu_wipe(self) -> dict:
        _not_modelled("start_gpu_wipe")

    def gpu_wipe_state(self) -> str:
        _not_modelled("gpu_wipe_state")

    def start_diagnostics(self, level: int) -> dict:
        _not_modelled("start_diagnostics")

    def diagnostics(self) -> dict:
        _not_modelled("diagnostics")

    def cancel_diagnostics(self) -> dict:
        _not_modelled("cancel_diagnostics")

    def start_gpu_reset(self, index: int) -> dict:
        _not_modelled("start_gpu_reset")

    def gpu_reset(self) -> dict:
        _not_modelled("gpu_reset")

    def gpu_healthy(self, index: int | None) -> bool:
        _not_modelled("gpu_healthy")
