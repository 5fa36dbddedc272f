"""A node's BMC and agent in the test process, for workflow tests that hand them in as
`Clients`: the calls every workflow makes, answered as a healthy server would, and written to a
shared log where the order matters. Tests subclass them for the behaviour they are about
(firmware that drifts, diagnostics that fail)."""

from __future__ import annotations

from fleet.models import GPU, Node


class FakeBMC:
    def __init__(self, log: list[str]):
        self.log = log
        self.calls, self.seconds = 0, 0.0

    def insert_media(self, url: str, *, removable: bool = False) -> None:
        self.log.append("insert_media")

    def set_boot_override(self, target: str, enabled: str = "Once") -> None:
        pass

    def power_state(self) -> str:
        return "On"

    def reset(self, reset_type: str) -> None:
        self.log.append("reset")

    def close(self) -> None:
        pass


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
