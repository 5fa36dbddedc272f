"""Servers a hostile tenant runs, on loopback: one that drips its answer a byte at a time, one that
counts who connects, and a DNS server that answers one address and then another (rebinding)."""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from dnslib import QTYPE, RR, A, DNSRecord  # type: ignore[import-untyped]
from dnslib.server import BaseResolver, DNSServer  # type: ignore[import-untyped]

from tests.support.ports import free_port

DRIPPED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Dripping(socketserver.ThreadingTCPServer):
    """Reads a request, then sends `answer` one byte every `interval` seconds; it gives up after
    `give_up_after` seconds (so a client with no deadline of its own is not held for ever)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, interval: float = 2.0, answer: bytes = DRIPPED, give_up_after: float = 8.0, host="127.0.0.1"):
        self.interval = interval
        self.answer = answer
        self.give_up_after = give_up_after
        self.connections = 0
        super().__init__((host, 0), DripHandler)
        self.url = f"http://{host}:{self.server_address[1]}"


class DripHandler(socketserver.BaseRequestHandler):
    server: Dripping

    def handle(self):
        self.server.connections += 1
        began = time.monotonic()
        self.request.settimeout(self.server.give_up_after)
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                received += chunk
            for byte in self.server.answer:
                if time.monotonic() - began > self.server.give_up_after:
                    return
                self.request.sendall(bytes([byte]))
                time.sleep(self.server.interval)
        except OSError:
            return  # the client hung up: what a deadline does


Server = TypeVar("Server", bound=socketserver.BaseServer)


@contextmanager
def running(server: Server) -> Iterator[Server]:
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class Rebinding(BaseResolver):
    """Answers every A question with `first` the first time, `then` every time after."""

    def __init__(self, first: str, then: str):
        self.first, self.then = first, then
        self.asked = 0

    def resolve(self, request, handler):
        reply = request.reply()
        if request.q.qtype == QTYPE.A:
            address = self.first if self.asked == 0 else self.then
            self.asked += 1
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=0))
        return reply


@contextmanager
def dns_server(resolver: BaseResolver) -> Iterator[int]:
    """A DNS server on 127.0.0.1 (UDP) answering as `resolver` says; yields its port."""
    port = free_port()
    server = DNSServer(resolver, port=port, address="127.0.0.1")
    server.start_thread()
    try:
        yield port
    finally:
        server.stop()


def asking(dns_port: int):
    """A resolver (core.outbound.Resolver) that asks the DNS server on 127.0.0.1:`dns_port`."""

    def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        answer = DNSRecord.parse(DNSRecord.question(host, "A").send("127.0.0.1", dns_port, timeout=2))
        return [ipaddress.ip_address(str(record.rdata)) for record in answer.rr if record.rtype == QTYPE.A]

    return resolve


class Listener(socketserver.ThreadingTCPServer):
    """Counts who connects, records each request's head, and answers 204."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int = 0):
        self.heads: list[bytes] = []
        self.connections = 0
        super().__init__((host, port), ListenerHandler)


class ListenerHandler(socketserver.BaseRequestHandler):
    server: Listener

    def handle(self):
        self.server.connections += 1
        self.request.settimeout(2)
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                chunk = self.request.recv(65536)
                if not chunk:
                    break
                received += chunk
            self.server.heads.append(received.partition(b"\r\n\r\n")[0])
            self.request.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass
        finally:
            self.request.shutdown(socket.SHUT_RDWR)
