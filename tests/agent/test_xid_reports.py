"""The agent's push path for XIDs (agent/xid_reports.py): what it reports, and how it retries.

The reporter reads a real SimBackend over a simulated node whose XID counts the test raises. The
control plane's end of the contract is tests/agent/xid_receiver.py, and the clocks are the
reporter's own, injected where a test needs to move time on.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import aiohttp
import pytest
import requests
from aiohttp import web

from agent.app import Served, make_app
from agent.sim import SimBackend, StandaloneNode
from agent.xid_reports import XidReporter, reporting, watch
from tests.agent.xid_receiver import XidReceiver
from tests.support.ports import free_port
from tests.support.processes import REPO_ROOT, Process, answers, once_ready, wait_for

NODE = "node-007"
TOKEN = "node-token-for-the-test-0123456789"
SEEN = datetime(2026, 12, 1, 21, 50, 1, 123456, tzinfo=UTC).timestamp()
SEEN_AT = "2026-12-01T21:50:01.123456Z"


class Node(StandaloneNode):
    """A simulated node whose GPUs log the XIDs the test gives them, and which may be switched off."""

    def __init__(self):
        super().__init__(NODE, gpu_count=2)
        self.counts: dict[int, dict[int, int]] = {}
        self.silent: str | None = None

    def xid(self, gpu: int, xid: int) -> None:
        per_xid = self.counts.setdefault(gpu, {})
        per_xid[xid] = per_xid.get(xid, 0) + 1

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return {gpu: dict(per_xid) for gpu, per_xid in self.counts.items()}

    def silent_because(self, now: float) -> str | None:
        return self.silent


class Clock:
    """A monotonic clock the test moves on."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def receiver():
    server = XidReceiver()
    yield server
    server.close()


@pytest.fixture
def node() -> Node:
    return Node()


def reporter_for(node: Node, receiver: XidReceiver, **clocks) -> XidReporter:
    return XidReporter(SimBackend(node), receiver.report_url(NODE), TOKEN, clock=lambda: SEEN, **clocks)


def report(gpu: int, xid: int, occurrence: int) -> dict:
    return {"gpu": gpu, "xid": xid, "occurrence": occurrence, "seen_at": SEEN_AT}


def run(scenario: Callable[[aiohttp.ClientSession], Awaitable[object]]) -> None:
    async def main():
        async with aiohttp.ClientSession() as session:
            await scenario(session)

    asyncio.run(main())


def test_counts_there_at_the_first_scan_are_not_reported_and_each_rise_is_reported_once(node, receiver):
    node.xid(0, 79)
    node.xid(0, 79)
    node.xid(1, 13)
    reporter = reporter_for(node, receiver)

    async def scenario(session):
        reporter.scan()  # the baseline
        assert not reporter.due()
        await reporter.send_due(session)
        node.xid(1, 48)
        reporter.scan()
        await reporter.send_due(session)
        reporter.scan()  # nothing new
        await reporter.send_due(session)
        node.xid(0, 79)
        reporter.scan()
        await reporter.send_due(session)

    run(scenario)
    assert receiver.bodies() == [report(1, 48, 1), report(0, 79, 3)]
    first = receiver.received[0]
    assert first.node == NODE and first.authorization == f"Bearer {TOKEN}"
    assert first.content_type == "application/json"
    assert not reporter.pending


def test_seen_at_is_utc_with_microseconds_and_z(node, receiver):
    reporter = XidReporter(SimBackend(node), receiver.report_url(NODE), TOKEN)
    reporter.scan()
    before = time.time()
    node.xid(0, 31)
    reporter.scan()
    (waiting,) = reporter.pending
    seen = datetime.strptime(waiting.seen_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    assert before - 0.001 <= seen <= time.time() and len(waiting.seen_at) == len(SEEN_AT)


def test_several_rises_in_one_scan_are_reported_in_order_one_at_a_time_the_first_retried_until_taken(node, receiver):
    """watch() as it runs in the agent: a 503 twice, then each report once, never two at once."""
    receiver.answers = [503, 503]
    receiver.delay = 0.05
    reporter = reporter_for(node, receiver)
    reporter.scan()
    node.xid(1, 79)
    node.xid(0, 48)
    node.xid(0, 48)
    node.xid(0, 94)

    async def scenario(session):
        task = asyncio.create_task(watch([reporter], interval=0.02))
        await asyncio.to_thread(receiver.wait_for, 5)
        await asyncio.sleep(0.3)  # nothing more comes
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario)
    first, second, third = report(0, 48, 2), report(0, 94, 1), report(1, 79, 1)
    assert receiver.bodies() == [first, first, first, second, third]
    tries = [r.at for r in receiver.received[:3]]
    # 0.5 s after the first 503, then 1 s after the second (each answer takes 0.05 s).
    assert 0.5 <= tries[1] - tries[0] < 1.0 and 1.0 <= tries[2] - tries[1] < 2.0, tries
    assert receiver.most_at_once[NODE] == 1
    assert not reporter.pending


def test_a_report_the_control_plane_refuses_is_dropped_and_the_next_one_goes(node, receiver, caplog):
    receiver.answers = [400]
    reporter = reporter_for(node, receiver)
    reporter.scan()
    node.xid(0, 79)
    node.xid(1, 79)

    async def scenario(session):
        reporter.scan()
        await reporter.send_due(session)
        await asyncio.sleep(0.6)  # past the first retry a 5xx would have had
        reporter.scan()
        await reporter.send_due(session)

    run(scenario)
    assert receiver.bodies() == [report(0, 79, 1), report(1, 79, 1)]
    assert not reporter.pending
    assert "XID 79 on GPU 0 (occurrence 1, seen 2026-12-01T21:50:01.123456Z) refused by" in caplog.text
    assert "400" in caplog.text and "dropped" in caplog.text


def test_retries_back_off_from_half_a_second_to_thirty_and_give_up_after_an_hour(node, receiver, caplog):
    receiver.answers = [503] * 1000
    clock = Clock()
    reporter = reporter_for(node, receiver, monotonic=clock)
    reporter.scan()
    node.xid(0, 79)
    reporter.scan()
    waits = []

    async def scenario(session):
        while True:
            await reporter.send_due(session)
            if not reporter.pending:
                break
            waited = 0.0
            while not reporter.due():
                clock.now += 0.25
                waited += 0.25
            waits.append(waited)

    run(scenario)
    assert waits[:8] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert set(waits[8:]) == {30.0}
    assert not reporter.pending
    assert len(receiver.received) == len(waits)  # the last wait ended in giving up, without a try
    assert {r.body["occurrence"] for r in receiver.received} == {1}
    assert {r.body["seen_at"] for r in receiver.received} == {SEEN_AT}
    assert "not delivered within 1 h: dropped" in caplog.text


def test_a_refused_token_is_tried_again_a_minute_later_with_the_same_report(node, receiver):
    receiver.answers = [401]
    clock = Clock()
    reporter = reporter_for(node, receiver, monotonic=clock)
    reporter.scan()
    node.xid(1, 74)
    reporter.scan()

    async def scenario(session):
        await reporter.send_due(session)
        clock.now += 59.9
        assert not reporter.due()
        clock.now += 0.1
        await reporter.send_due(session)

    run(scenario)
    assert receiver.bodies() == [report(1, 74, 1)] * 2
    assert not reporter.pending


def test_a_control_plane_that_does_not_answer_is_a_retry(node, receiver):
    clock = Clock()
    reporter = XidReporter(SimBackend(node), f"http://127.0.0.1:{free_port()}/v1/agents/{NODE}/xids", TOKEN)
    reporter.monotonic = clock
    reporter.scan()
    node.xid(0, 79)
    reporter.scan()

    async def scenario(session):
        await reporter.send_due(session)

    run(scenario)
    assert len(reporter.pending) == 1 and not reporter.due()
    clock.now += 0.5
    assert reporter.due()


def test_nothing_is_read_while_the_node_is_down_and_a_rise_seen_once_it_is_back_is_reported(node, receiver):
    node.silent = "node-007 is powered off"
    reporter = reporter_for(node, receiver)
    reporter.scan()
    node.xid(0, 79)  # before the first reading that worked: part of the baseline
    node.silent = None
    reporter.scan()
    assert not reporter.pending
    node.silent = "node-007 is still booting"
    node.xid(0, 79)
    reporter.scan()
    assert not reporter.pending
    node.silent = None
    reporter.scan()
    assert [r.occurrence for r in reporter.pending] == [2]


def test_a_counter_that_restarted_is_counted_on_from_where_it_restarted(node, receiver):
    """The counter rules' blind spot: the agent restarts and the same XID comes again soon after."""
    node.xid(0, 79)
    node.xid(0, 79)
    reporter = reporter_for(node, receiver)
    reporter.scan()
    node.counts = {}  # the node rebooted: its driver counts from nothing
    reporter.scan()
    node.xid(0, 79)
    reporter.scan()
    assert [(r.gpu, r.xid, r.occurrence) for r in reporter.pending] == [(0, 79, 1)]


def test_the_agents_app_reports_while_it_serves_and_stops_its_reporter_at_cleanup(node, receiver):
    async def scenario(session):
        backend = SimBackend(node)
        app = make_app(Served(backend, TOKEN))
        app.cleanup_ctx.append(reporting([XidReporter(backend, receiver.report_url(NODE), TOKEN)], interval=0.02))
        runner = web.AppRunner(app)
        await runner.setup()
        await asyncio.sleep(0.1)
        node.xid(1, 79)
        (received,) = await asyncio.to_thread(receiver.wait_for, 1)
        await runner.cleanup()
        assert received.body["occurrence"] == 1
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run(scenario)


# The real program: `gpu-agent --backend host --xid-report-url URL` on a stand-in GPU server.


def kmsg_xid(sequence: int, xid: int) -> str:
    """A /dev/kmsg record of an XID of the H100 (PCI 0000:18:00), as NVIDIA's driver logs it."""
    return f"3,{sequence},{sequence * 1000},-;NVRM: Xid (PCI:0000:18:00): {xid}, pid='<unknown>', name=<unknown>\n"


@pytest.mark.timing
def test_the_agent_program_reports_a_new_xid_from_its_kernel_log_and_not_those_logged_before_it_started(
    tmp_path, receiver
):
    kmsg = tmp_path / "kmsg"
    # The ring buffer when the agent starts, long as on a server that has run a while: its XIDs are
    # no news, even if the reporter's first reading comes before the kernel log has all been read.
    other_records = "".join(f"6,{n},{n * 1000},-;usb 1-1: new device number {n}\n" for n in range(1, 20_001))
    kmsg.write_text(other_records + kmsg_xid(20_001, 79) + kmsg_xid(20_002, 79))
    (tmp_path / "token").write_text(TOKEN)
    port = free_port()
    process = Process(
        "gpu-agent-xid-reports",
        [
            sys.executable, "-m", "tests.agent.fake_gpu_server", str(tmp_path / "nvml-calls"),
            "--listen", f"127.0.0.1:{port}", "--token-file", str(tmp_path / "token"),
            "--kmsg", str(kmsg), "--tcti", "swtpm:host=127.0.0.1,port=1", "--ak-cert", str(tmp_path / "ak.pem"),
            "--event-log", str(tmp_path / "event-log"),
            "--xid-report-url", receiver.report_url("gpu-host-7"),
        ],
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        once_ready(process, "the agent", lambda: answers(url), timeout=20)
        counted = 'gpu_agent_xid_errors_total{gpu="0",xid="79"} 2.0'
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        wait_for("the XIDs of before", lambda: counted in requests.get(url, headers=bearer, timeout=10).text, 10)
        time.sleep(1.0)  # the kernel log read to its end and the baseline taken
        assert receiver.received == []

        with kmsg.open("a") as log:
            log.write(kmsg_xid(20_003, 79))
        (received,) = receiver.wait_for(1, timeout=10)
        assert received.authorization == f"Bearer {TOKEN}" and received.node == "gpu-host-7"
        assert received.body | {"seen_at": ""} == {"gpu": 0, "xid": 79, "occurrence": 3, "seen_at": ""}
        time.sleep(0.5)
        assert len(receiver.received) == 1
    finally:
        process.stop()
    assert "reporting new XIDs to" in process.output() and "reported to" in process.output()


@pytest.mark.parametrize("value", ["ftp://example.com/xids", "example.com/xids", "http://"])
def test_a_bad_report_url_from_the_option_or_the_environment_is_a_usage_error(tmp_path, value):
    (tmp_path / "token").write_text(TOKEN)
    for args, env in (
        (["--xid-report-url", value], {}),
        ([], {"GPU_AGENT_XID_REPORT_URL": value}),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "agent", "--backend", "sim", "--token-file", str(tmp_path / "token"), *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", **env},
            check=False,
        )
        assert result.returncode == 2 and "is not an http or https URL" in result.stderr, result.stderr
