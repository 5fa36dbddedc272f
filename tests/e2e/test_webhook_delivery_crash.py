"""A worker killed in the middle of a webhook delivery loses nothing: the outbox row it had claimed
comes due again when its send lease runs out, and a worker sends it again, with the same
webhook-id and a valid signature, until the tenant's receiver answers 2xx.

All real processes: gunicorn, two Celery workers and beat on the test database, a receiver of the
test's own on loopback. The fleet (bmcsim's four nodes) is enrolled and walked to available in this
process: its inspection has nothing to do with webhooks, and its workflows would keep the workers
busy. The processes' send lease is shortened to SEND_LEASE, so the test waits that out.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest
import requests
from django.core.management import call_command
from standardwebhooks import Webhook as Verifier

from fleet.models import Node
from tests.support.bmcsim import start_bmcsim
from tests.support.factories import make_available, tenant_token
from tests.support.loopback import serving
from tests.support.processes import wait_for

SEND_LEASE = timedelta(seconds=10)
TIMEOUT_SECONDS = 5  # each send's deadline
PLANE = {
    "GPUFLEET_OUTBOUND_DEADLINE_SECONDS": str(TIMEOUT_SECONDS),
    "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "GPUFLEET_WEBHOOK_SEND_LEASE_SECONDS": str(SEND_LEASE.total_seconds()),
}
# How long the receiver holds the first request before the worker is killed: long enough for beat
# (every 0.5 s here) to have the other worker look for due deliveries a few times, short enough
# for the worker to be still waiting for the answer (it gives up after TIMEOUT_SECONDS).
HOLD_SECONDS = 2.0
assert HOLD_SECONDS < TIMEOUT_SECONDS - 1


class HoldingReceiver(ThreadingHTTPServer):
    """A tenant's endpoint on loopback. The first request for each webhook-id is read and then
    held, never answered; every later one is answered 204."""

    daemon_threads = True

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: set[str | None] = set()
        # (headers, body, the client's port, when) of each request held
        self.held: queue.Queue[tuple[dict, bytes, int, float]] = queue.Queue()
        # (headers, body, when) of each request answered
        self.answered: queue.Queue[tuple[dict, bytes, float]] = queue.Queue()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), HoldingHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks"

    def server_close(self) -> None:
        self.release.set()  # the request still held is let go: its connection closes with the server
        super().server_close()


class HoldingHandler(BaseHTTPRequestHandler):
    server: HoldingReceiver

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = dict(self.headers)
        with self.server.lock:
            first = headers.get("webhook-id") not in self.server.seen
            self.server.seen.add(headers.get("webhook-id"))
        if first:
            self.server.held.put((headers, body, self.client_address[1], time.monotonic()))
            self.server.release.wait(timeout=300)
            self.close_connection = True
            return  # no answer at all: the connection is closed when the test ends
        self.server.answered.put((headers, body, time.monotonic()))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def pid_with_socket(local_port: int, pids: list[int]) -> int | None:
    """Which of `pids` holds the loopback TCP socket whose local port is `local_port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == local_port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) in inodes:
                    return pid
            except OSError:
                continue
    return None


def deliveries_ran(log: str) -> int:
    """How many deliver_webhooks tasks a worker's log says it finished."""
    return sum("workflows.tasks.deliver_webhooks[" in line and " succeeded " in line for line in log.splitlines())


@pytest.fixture
def bmcsim(tmp_path):
    """A small bmcsim: its nodes are only where the reservation is placed."""
    sim = start_bmcsim(tmp_path / "bmcsim")
    yield sim
    sim.stop()


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_delivery_interrupted_by_a_killed_worker_is_sent_again_with_the_same_id(bmcsim, control_plane):
    # The workers boot while the fleet is made; beat, whose reconciler would inspect an enrolled
    # node, once it is available.
    workers = {name: control_plane.start_worker(name) for name in ("w1", "w2")}
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    make_available(list(Node.objects.all()))
    processes = [*workers.values(), control_plane.start_beat()]
    web = control_plane.start_web()
    receiver = HoldingReceiver()
    acme = requests.Session()
    acme.headers["Authorization"] = f"Token {tenant_token('acme')}"
    with serving(receiver):
        made = acme.post(f"{web}/v1/webhooks", json={"url": receiver.url, "events": ["reservation.released"]})
        assert made.status_code == 201, made.text
        hook = made.json()
        wait_for("the workers and beat ready", lambda: all(" ready." in p.output() for p in processes), 60)

        # The quickest event: a reservation for later, released at once (no node is provisioned).
        now = datetime.now(UTC)
        later = {"starts_at": (now + timedelta(hours=1)).isoformat(), "ends_at": (now + timedelta(hours=2)).isoformat()}
        created = acme.post(f"{web}/v1/reservations", json={"node_count": 1, **later})
        assert created.status_code == 201, created.text
        reservation = created.json()["id"]
        released = acme.post(f"{web}/v1/reservations/{reservation}/release", json={})
        assert released.status_code == 200, released.text

        headers, body, client_port, held_at = receiver.held.get(timeout=30)
        pids = {w.popen.pid: name for name, w in workers.items()}
        holder = pids.get(pid_with_socket(client_port, list(pids)))
        assert holder is not None, f"no worker holds the connection from port {client_port}"
        (other,) = set(workers) - {holder}
        ran_before = deliveries_ran(workers[other].output())
        time.sleep(max(0.0, HOLD_SECONDS - (time.monotonic() - held_at)))
        # The other worker looked for due deliveries while this one was in flight, and found none:
        # the claim's lease keeps two workers from sending one delivery at once.
        assert deliveries_ran(workers[other].output()) > ran_before
        assert receiver.answered.empty(), "the delivery was sent again while the first send was in flight"

        workers[holder].kill()  # SIGKILL to its process group, in the middle of the send
        assert time.monotonic() - held_at < TIMEOUT_SECONDS, "too slow: the worker may have given up already"
        path = f"{web}/v1/webhooks/{hook['id']}/deliveries"
        listed = acme.get(path).json()["results"]
        assert len(listed) == 1, f"the tenant's deliveries: {listed}"
        (pending,) = listed
        # Killed before it recorded anything: still pending, no attempt counted, leased for later.
        assert pending["message_id"] == headers["webhook-id"]
        assert (pending["state"], pending["attempts"], pending["last_error"]) == ("pending", 0, "")
        assert datetime.fromisoformat(pending["next_attempt_at"]) > datetime.now(UTC)
        control_plane.start_worker("w3")

        try:
            again_headers, again_body, again_at = receiver.answered.get(timeout=SEND_LEASE.total_seconds() + 30)
        except queue.Empty:
            raise AssertionError(f"not sent again within the lease ({SEND_LEASE}) and 30 s after the crash") from None
        print(f"sent again {again_at - held_at:.1f} s after the interrupted send (lease {SEND_LEASE})")
        assert again_headers["webhook-id"] == headers["webhook-id"]
        for sent_headers, sent_body in ((headers, body), (again_headers, again_body)):
            message = Verifier(hook["secret"]).verify(sent_body, sent_headers)
            assert message["type"] == "reservation.released"
            assert message["data"]["reservation"] == reservation

        def delivered() -> bool:
            (delivery,) = acme.get(path).json()["results"]
            return delivery["state"] == "delivered"

        wait_for("the tenant to see it delivered", delivered, 10)
        (delivery,) = acme.get(path).json()["results"]
        assert delivery["id"] == pending["id"] and delivery["message_id"] == headers["webhook-id"]
        assert delivery["last_status"] == 204 and delivery["delivered_at"]
