"""The push path for XIDs: the agent reports each new XID to the control plane as soon as it sees it.

Prometheus scrapes the XID counter every 15 to 30 s, so this path gets a fault acted on sooner.
It also sees an XID that comes back soon after the counter restarted, which the counter rules miss.
Prometheus and Alertmanager stay the second path; the control plane acts on an occurrence once.

    POST {report_url}   Authorization: Bearer <the node's token>
    {"gpu": 5, "xid": 79, "occurrence": 3, "seen_at": "2026-12-01T21:50:01.123456Z"}

`occurrence` is the agent's count of that XID on that GPU, this one included; `seen_at` is when the
agent first saw it. A retry sends the same report again, so the control plane knows the repeat.

The counters are read every SCAN_INTERVAL_S. The counts at the first reading are the baseline and
are not reported: they were there before the reporter watched. After that, each (gpu, xid) count
that rose gives one report. A count that fell means the counter restarted, and the reporter
counts on from there. While the backend is Unavailable (node off or booting), nothing is read, and
a rise found once it answers again is reported then.

How the control plane answers decides what happens to a report:
    202, 200 (any 2xx)   delivered (200: a repeat of one it already has)
    401                  the token was refused (perhaps being rotated): kept, tried again every 60 s
    other 4xx            refused (400: a body it will not take): logged and dropped
    408, 429, 5xx, anything else or no answer: tried again, 0.5 s later, then twice as long
                         after each failure, up to 30 s
A report not delivered within an hour is dropped with a log line; Prometheus still has it.
Each agent sends its reports in order, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp

from .backend import Backend, Unavailable

SCAN_INTERVAL_S = 0.2
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 30.0
UNAUTHORIZED_RETRY_S = 60.0
GIVE_UP_S = 3600.0
REQUEST_TIMEOUT_S = 10.0
MAX_PENDING = 1000  # reports waiting per agent; more are dropped with a log line
log = logging.getLogger("gpu-agent")


def rfc3339(timestamp: float) -> str:
    """ "2026-12-01T21:50:01.123456Z": UTC, always with microseconds."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Report:
    gpu: int
    xid: int
    occurrence: int
    seen_at: str
    queued_at: float  # on the reporter's monotonic clock, for how long it has waited

    def body(self) -> dict:
        return {"gpu": self.gpu, "xid": self.xid, "occurrence": self.occurrence, "seen_at": self.seen_at}

    def __str__(self) -> str:
        return f"XID {self.xid} on GPU {self.gpu} (occurrence {self.occurrence}, seen {self.seen_at})"


class XidReporter:
    """One agent's reports: scan() finds new XIDs and send_due() sends them; watch() calls both."""

    def __init__(
        self,
        backend: Backend,
        report_url: str,
        token: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.backend = backend
        self.report_url = report_url
        self.clock = clock  # for seen_at
        self.monotonic = monotonic  # for retries and giving up
        self._headers = {"Authorization": f"Bearer {token}"}
        self._counts: dict[tuple[int, int], int] | None = None  # None until the first reading
        self.pending: deque[Report] = deque()
        self._retry_at = 0.0
        self._delay = FIRST_RETRY_S

    def scan(self) -> None:
        """Read the XID counters and queue one report for each (gpu, xid) count that rose."""
        try:
            per_gpu = self.backend.xid_counts()
        except Unavailable:
            return
        counts = {(gpu, xid): count for gpu, per_xid in per_gpu.items() for xid, count in per_xid.items()}
        if self._counts is not None:
            seen_at, now = rfc3339(self.clock()), self.monotonic()
            for (gpu, xid), count in sorted(counts.items()):
                if count > self._counts.get((gpu, xid), 0):
                    self._queue(Report(gpu, xid, count, seen_at, now))
        self._counts = counts

    def _queue(self, report: Report) -> None:
        if len(self.pending) >= MAX_PENDING:
            log.error("%s not reported to %s: %d reports already wait", report, self.report_url, MAX_PENDING)
        else:
            self.pending.append(report)

    def due(self) -> bool:
        return bool(self.pending) and self.monotonic() >= self._retry_at

    async def send_due(self, session: aiohttp.ClientSession) -> None:
        """Send the waiting reports in order until none is left or the next one must wait."""
        while self.due():
            report = self.pending[0]
            if self.monotonic() - report.queued_at >= GIVE_UP_S:
                self._drop(f"not delivered within {GIVE_UP_S / 3600:g} h: dropped (Prometheus still has it)")
                continue
            try:
                async with session.post(self.report_url, json=report.body(), headers=self._headers) as answer:
                    status, text = answer.status, (await answer.text())[:200]
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                status, text = None, str(error) or type(error).__name__
            if status is not None and 200 <= status < 300:
                log.info("%s reported to %s: %d", report, self.report_url, status)
                self._drop()
            elif status == 401:
                log.warning(
                    "%s refused by %s: 401 %s; again in %g s", report, self.report_url, text, UNAUTHORIZED_RETRY_S
                )
                self._retry_at = self.monotonic() + UNAUTHORIZED_RETRY_S
            elif status is not None and 400 <= status < 500 and status not in (408, 429):
                self._drop(f"refused by {self.report_url}: {status} {text}; dropped")
            else:
                what = f"{status} {text}" if status is not None else text
                log.warning("%s not delivered to %s: %s; again in %g s", report, self.report_url, what, self._delay)
                self._retry_at = self.monotonic() + self._delay
                self._delay = min(2 * self._delay, MAX_RETRY_S)

    def _drop(self, why: str = "") -> None:
        """The first waiting report is done with (delivered, or dropped for `why`): on to the next at once."""
        report = self.pending.popleft()
        if why:
            log.error("%s %s", report, why)
        self._retry_at, self._delay = 0.0, FIRST_RETRY_S


async def watch(reporters: Sequence[XidReporter], interval: float = SCAN_INTERVAL_S) -> None:
    """Scan every reporter each `interval` and send what is due, until cancelled. Each reporter
    sends in a task of its own, so a control plane slow to answer one agent holds up no other."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    sending: dict[XidReporter, asyncio.Task] = {}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            while True:
                for reporter in reporters:
                    try:
                        reporter.scan()
                    except Exception:  # a reading gone wrong stops neither this agent's nor the others' reports
                        log.exception("reading the XID counters for %s failed", reporter.report_url)
                    task = sending.get(reporter)
                    if (task is None or task.done()) and reporter.due():
                        sending[reporter] = asyncio.create_task(reporter.send_due(session))
                await asyncio.sleep(interval)
        finally:
            for task in sending.values():
                task.cancel()
            await asyncio.gather(*sending.values(), return_exceptions=True)


def reporting(reporters: Sequence[XidReporter], interval: float = SCAN_INTERVAL_S):
    """An aiohttp cleanup context (app.cleanup_ctx.append) that runs watch() while the app serves."""

    async def context(app):
        task = asyncio.create_task(watch(reporters, interval))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context
