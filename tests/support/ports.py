"""Free loopback ports, as the OS hands them out."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A free port whose next one is free too (swtpm's server and control ports)."""
    for _ in range(50):
        with socket.socket() as server, socket.socket() as control:
            server.bind(("127.0.0.1", 0))
            port = server.getsockname()[1]
            try:
                control.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two consecutive free ports for swtpm")
