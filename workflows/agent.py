"""A client for a node's in-band agent (inventory, GPU memory wipe and reset, diagnostics, attestation evidence).

Every call carries the node's agent token; the agent answers 401 without it. Every call goes
through core/outbound.py to an address on the BMC networks (fleet/bmc_access.py): it ends at its
deadline however slowly the agent answers, and reads at most GPUFLEET_OUTBOUND_MAX_BODY_BYTES.

The agent answers only while its node is on and booted: until then it is unavailable, which
the workflows wait out, within their timeouts.
"""

from __future__ import annotations

import time

from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from core import outbound
from fleet.bmc_access import refusal_outside_bmc_networks


class AgentUnavailable(Exception):
    """The agent does not answer (yet): the node is off, booting, or its agent is down."""


class AgentError(Exception):
    """The agent answered with something unusable."""


class AgentCannot(AgentError):
    """The agent cannot do what was asked (501): on a real server without DCGM, diagnostics."""


class AgentClient:
    def __init__(
        self, node: str, agent_url: str, token: str, *, timeout: float | None = None, max_body_bytes: int | None = None
    ):
        self.node = node
        self.base = agent_url.rstrip("/")
        self.timeout = timeout or settings.OUTBOUND_DEADLINE_SECONDS  # each call's, from connection to last byte
        self.max_body_bytes = max_body_bytes or settings.OUTBOUND_MAX_BODY_BYTES
        self.headers = {"Authorization": f"Bearer {token}"}
        self.calls = 0
        self.seconds = 0.0

    def close(self) -> None:
        """Nothing to let go: each call has a connection of its own, closed when it ends."""

    def _request(self, method: str, path: str, json: dict | None = None) -> outbound.Answer:
        """One call; AgentUnavailable if it got no answer in time, AgentError if the answer is refused."""
        began = time.perf_counter()
        try:
            return outbound.request(
                method,
                f"{self.base}/{path}",
                check=refusal_outside_bmc_networks,
                deadline=self.timeout,
                max_body_bytes=self.max_body_bytes,
                headers=self.headers,
                json_body=json,
            )
        except outbound.OutboundUnreachable as error:
            name = "Timeout" if isinstance(error, outbound.DeadlinePassed) else "ConnectionError"
            raise AgentUnavailable(f"{self.node}: agent {path}: {name}") from None
        except outbound.OutboundError as error:
            raise AgentError(f"{self.node}: agent {path}: {error.reason}") from None
        finally:
            self.seconds += time.perf_counter() - began

    def _call(self, method: str, path: str, json: dict | None = None) -> dict:
        self.calls += 1
        response = self._request(method, path, json)
        if response.status_code == 501:  # it will not answer otherwise later: no point waiting
            raise AgentCannot(f"{self.node}: agent {path}: {response.text[:200]}")
        if response.status_code == 503 or response.status_code >= 500:
            raise AgentUnavailable(f"{self.node}: agent {path}: {response.status_code} {response.text[:200]}")
        try:
            body = response.json()
        except ValueError as error:
            raise AgentError(f"{self.node}: agent {path}: answer is not JSON") from error
        if response.status_code >= 400 or not isinstance(body, dict):
            raise AgentError(f"{self.node}: agent {path}: {response.status_code} {str(body)[:200]}")
        return body

    def inventory(self) -> dict:
        return self._call("GET", "inventory")

    def start_gpu_wipe(self) -> dict:
        return self._call("POST", "gpu-wipe")

    def gpu_wipe_state(self) -> str:
        return str(self._call("GET", "gpu-wipe").get("state", ""))

    def start_gpu_reset(self, index: int) -> dict:
        return self._call("POST", "gpu-reset", json={"gpu": index})

    def gpu_reset(self) -> dict:
        """The last GPU reset: {"state": idle|running|succeeded|failed, "gpu", "detail", ...}."""
        return self._call("GET", "gpu-reset")

    def gpu_healthy(self, index: int | None) -> bool:
        """What the agent's gpu_agent_gpu_healthy says of one GPU, or with None of every GPU
        (False if it says nothing)."""
        self.calls += 1
        response = self._request("GET", "metrics")
        if response.status_code != 200:
            raise AgentUnavailable(f"{self.node}: agent metrics: {response.status_code}")
        readings = [
            sample.value == 1
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.name == "gpu_agent_gpu_healthy" and (index is None or sample.labels.get("gpu") == str(index))
        ]
        return bool(readings) and all(readings)

    def evidence(self, nonce: bytes) -> dict:
        return self._call("POST", "evidence", json={"nonce": nonce.hex()})

    def start_diagnostics(self, level: int) -> dict:
        return self._call("POST", "diagnostics", json={"level": level})

    def diagnostics(self) -> dict:
        """The last diagnostics run: {"state": idle|running|succeeded|failed|cancelled, "level",
        "started_at", "finished_at", "results": [{"test", "gpu", "passed", "detail"}]}."""
        return self._call("GET", "diagnostics")

    def cancel_diagnostics(self) -> dict:
        """Stop a running diagnostics run; the run as it then stands (one that had ended, as it ended)."""
        return self._call("DELETE", "diagnostics")
