"""A tenant's webhook endpoint on loopback, for the tests that check what the control plane sends."""

from __future__ import annotations

import queue
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver(ThreadingHTTPServer):
    """A tenant's endpoint on loopback: records every POST and answers `status`."""

    def __init__(self):
        self.status = 204
        self.received: queue.Queue[tuple[dict, bytes]] = queue.Queue()
        super().__init__(("127.0.0.1", 0), ReceiverHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.put((dict(self.headers), body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass
