"""A stand-in for the control plane's end of the agent's XID reports (POST /v1/agents/{node}/xids),
the other side of a network contract: it records each report and answers as it is told to.

It runs on an aiohttp runner with its event loop in a thread of its own, so a test can use it
from plain code, from its own event loop, or from another process (the agent, bmcsim).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True)
class Received:
    node: str
    authorization: str
    content_type: str
    body: dict
    at: float  # time.monotonic() when it arrived


class XidReceiver:
    def __init__(self, delay: float = 0.0):
        self.received: list[Received] = []
        self.answers: list[int] = []  # the statuses to answer, first one first; then 202 or 200 for a repeat
        self.delay = delay  # how long each answer takes
        self.most_at_once: dict[str, int] = defaultdict(int)  # node -> the most reports it had in flight at once
        self._in_flight: dict[str, int] = defaultdict(int)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="xid-receiver", daemon=True)
        self._thread.start()
        app = web.Application()
        app.router.add_post("/v1/agents/{node}/xids", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        self._await(self._runner.setup())
        self._await(web.TCPSite(self._runner, "127.0.0.1", 0).start())
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def report_url(self, node: str) -> str:
        return f"{self.url}/v1/agents/{node}/xids"

    def _await(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _receive(self, request: web.Request) -> web.Response:
        node = request.match_info["node"]
        self._in_flight[node] += 1
        self.most_at_once[node] = max(self.most_at_once[node], self._in_flight[node])
        try:
            body = await request.json()
            repeat = any(r.node == node and r.body == body for r in self.received)
            self.received.append(
                Received(
                    node,
                    request.headers.get("Authorization", ""),
                    request.headers.get("Content-Type", ""),
                    body,
                    time.monotonic(),
                )
            )
            await asyncio.sleep(self.delay)
            status = self.answers.pop(0) if self.answers else 200 if repeat else 202
        finally:
            self._in_flight[node] -= 1
        if status >= 400:
            return web.json_response({"detail": f"answered {status} as the test asked"}, status=status)
        return web.json_response(
            {"remediation": len(self.received), "status": "applied", "step": "gpu_reset"}, status=status
        )

    def bodies(self, node: str | None = None) -> list[dict]:
        return [r.body for r in self.received if node is None or r.node == node]

    def wait_for(self, count: int, timeout: float = 10.0, node: str | None = None) -> list[Received]:
        """The reports received (of `node`), once there are `count` of them."""
        deadline = time.monotonic() + timeout
        while len(found := [r for r in self.received if node is None or r.node == node]) < count:
            assert time.monotonic() < deadline, f"{len(found)} reports, not {count}, within {timeout} s: {found}"
            time.sleep(0.01)
        return found

    def close(self) -> None:
        self._await(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
