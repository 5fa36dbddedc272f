"""An HTTP server of a test's own on loopback, served from a thread for the length of a block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import HTTPServer


@contextmanager
def serving(server: HTTPServer) -> Iterator[str]:
    """Serve `server` until the block ends; yields its base URL. The thread looks for the end
    every 50 ms: serve_forever's default, half a second, is what every test's teardown would wait."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
