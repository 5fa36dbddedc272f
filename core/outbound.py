"""Every HTTP call the control plane makes to someone else's server: tenants' webhooks, BMCs, the
fabric's switch manager, node agents and the documents the commands read from a URL.

A call cannot be held and cannot be turned inward:
- the host is resolved once, every address it resolves to is checked, and the connection goes to
  exactly the address that was checked, with the original Host header and, over https, the
  original name as the TLS server name and in the certificate check (a name that answers a public
  address to the check and 127.0.0.1 to the connection reaches nothing: DNS rebinding);
- the whole call, connection to last byte, ends at its deadline: a watchdog shuts the socket down
  then, however slowly the answer trickles in (a timeout per read never fires on a server that
  sends one byte a second);
- at most `max_body_bytes` of the answer are read, and redirects are answered, never followed.

Who may be called is the caller's `check` (see `public_only` for tenants' URLs); the deadline and
the cap are arguments too, so that this module knows no settings.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Why an address may not be called, or None if it may.
AddressCheck = Callable[[IPAddress], str | None]
# Every address a host name resolves to, for a port.
Resolver = Callable[[str, int], list[IPAddress]]
DEFAULT_PORTS = {"http": 80, "https": 443}
CHUNK = 64 * 1024


class OutboundError(Exception):
    """A call that did not get an answer to use; `reason` says why, without the URL's secrets."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class OutboundRefused(OutboundError):
    """The URL is not one to call: its scheme, its credentials, or an address its host resolves to."""


class OutboundUnreachable(OutboundError):
    """No answer in time: the host did not resolve, the connection failed or the deadline passed.
    Worth trying again later."""


class DeadlinePassed(OutboundUnreachable):
    """The answer had not ended by the call's deadline."""


class AnswerTooLarge(OutboundError):
    """The answer's body is longer than the cap."""


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The operating system's answer (socket.getaddrinfo), in its order."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]) for *_, sockaddr in found]


# Special-purpose ranges (the IANA registries) that no tenant's URL may reach, each with its name.
# ipaddress's is_global alone is not enough: it holds 64:ff9b::a00:1 and 2002:a00:1::1 global.
SPECIAL_PURPOSE: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "cloud metadata service"),
    ("100.100.100.200/32", "cloud metadata service"),
    ("fd00:ec2::254/128", "cloud metadata service"),
    ("0.0.0.0/8", "unspecified ('this network', 0.0.0.0/8)"),
    ("10.0.0.0/8", "private (10.0.0.0/8)"),
    ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
    ("127.0.0.0/8", "loopback (127.0.0.0/8)"),
    ("169.254.0.0/16", "link-local (169.254.0.0/16)"),
    ("172.16.0.0/12", "private (172.16.0.0/12)"),
    ("192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"),
    ("192.0.2.0/24", "documentation (192.0.2.0/24)"),
    ("192.88.99.0/24", "6to4 relay anycast (192.88.99.0/24)"),
    ("192.168.0.0/16", "private (192.168.0.0/16)"),
    ("198.18.0.0/15", "benchmarking (198.18.0.0/15)"),
    ("198.51.100.0/24", "documentation (198.51.100.0/24)"),
    ("203.0.113.0/24", "documentation (203.0.113.0/24)"),
    ("224.0.0.0/4", "multicast (224.0.0.0/4)"),
    ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
    ("::/128", "unspecified (::)"),
    ("::1/128", "loopback (::1)"),
    ("::ffff:0:0/96", "IPv4-mapped (::ffff:0:0/96)"),
    ("::/96", "IPv4-compatible (::/96)"),
    ("64:ff9b::/96", "NAT64 (64:ff9b::/96)"),
    ("64:ff9b:1::/48", "local NAT64 (64:ff9b:1::/48)"),
    ("100::/64", "discard-only (100::/64)"),
    ("2001::/32", "Teredo (2001::/32)"),
    ("2001:2::/48", "benchmarking (2001:2::/48)"),
    ("2001:db8::/32", "documentation (2001:db8::/32)"),
    ("2001:10::/28", "ORCHID (2001:10::/28)"),
    ("2001:20::/28", "ORCHIDv2 (2001:20::/28)"),
    ("2002::/16", "6to4 (2002::/16)"),
    ("3fff::/20", "documentation (3fff::/20)"),
    ("5f00::/16", "segment routing (5f00::/16)"),
    ("fc00::/7", "unique local, private (fc00::/7)"),
    ("fe80::/10", "link-local (fe80::/10)"),
    ("fec0::/10", "site-local, deprecated (fec0::/10)"),
    ("ff00::/8", "multicast (ff00::/8)"),
)
_SPECIAL = tuple((ipaddress.ip_network(net), name) for net, name in SPECIAL_PURPOSE)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (IPv4-mapped or -compatible, NAT64, 6to4, Teredo's
    client), or None."""
    if address.version == 4:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    value = int(address)
    if address.ipv4_mapped or (address in ipaddress.ip_network("::/96") and value > 1):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in ipaddress.ip_network("64:ff9b::/96") or address in ipaddress.ip_network("64:ff9b:1::/48"):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def special_purpose(address: IPAddress) -> str | None:
    """The special-purpose range `address` is in, by name (for an IPv6 address that carries an
    IPv4 one, also the range of the IPv4 inside), or None for an ordinary public address."""
    names = [name for network, name in _SPECIAL if address in network]
    inner = embedded_ipv4(address)
    if inner is not None:
        names.append(f"carrying {inner}, {special_purpose(inner) or 'a public address'}")
    if not names and not address.is_global:
        names.append("not globally routable")
    return "; ".join(names) or None


def any_address(address: IPAddress) -> None:
    """A check that passes every address: for URLs an operator gave, such as a document to import."""
    return None


def public_only(allowed: Iterable[IPNetwork] = ()) -> AddressCheck:
    """A check for URLs that someone outside gave: public addresses only, and those in `allowed`."""
    admitted = tuple(allowed)

    def refusal(address: IPAddress) -> str | None:
        if any(address in network for network in admitted):
            return None
        found = special_purpose(address)
        return f"which is not a public address: {found}" if found else None

    return refusal


@dataclass(frozen=True)
class Answer:
    status_code: int
    headers: Mapping[str, str]  # names in any case
    body: bytes = field(repr=False)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError if it is not."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Target:
    """Where a URL goes: its scheme, host name and port, the checked address, the request path."""

    scheme: str
    host: str
    port: int
    address: IPAddress
    path: str


def resolve_checked(url: str, check: AddressCheck, resolver: Resolver = system_resolver) -> Target:
    """Resolve the URL's host once and check every address; OutboundRefused naming the address and
    why, or OutboundUnreachable if the host does not resolve."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError as error:
        raise OutboundRefused(f"not a usable URL: {error}") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise OutboundRefused("the URL must be http or https, with a host")
    if parts.username is not None or parts.password is not None:
        raise OutboundRefused("the URL may not hold credentials")
    host = parts.hostname
    try:
        found = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = resolver(host, port)
        except (OSError, UnicodeError, ValueError) as error:
            raise OutboundUnreachable(f"{host} does not resolve ({error})") from None
    if not found:
        raise OutboundUnreachable(f"{host} does not resolve")
    for address in found:
        why = check(address)
        if why is not None:
            where = str(address) if host == str(address) else f"{host} resolves to {address}"
            raise OutboundRefused(f"{where}, {why}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, found[0], path)


class _Watchdog:
    """Shuts a connection's socket down at the deadline, whatever the call is waiting on then."""

    def __init__(self, connection: HTTPConnection, seconds: float):
        self.connection = connection
        self.fired = False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        sock = self.connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed already
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Watchdog:
        self.timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.timer.cancel()


def request(
    method: str,
    url: str,
    *,
    check: AddressCheck,
    deadline: float,
    max_body_bytes: int,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    json_body: Any = None,
    read_body: bool = True,
    resolver: Resolver = system_resolver,
    ssl_context: ssl.SSLContext | None = None,
) -> Answer:
    """One request, answered within `deadline` seconds or OutboundUnreachable; a body over
    `max_body_bytes` is AnswerTooLarge; a redirect is returned as it came, not followed. The body
    is `body`'s bytes, or `json_body` as JSON. With `read_body` false only the status and headers
    are read."""
    began = time.monotonic()
    if json_body is not None:
        body, headers = json.dumps(json_body).encode(), {**(headers or {}), "Content-Type": "application/json"}
    target = resolve_checked(url, check, resolver)
    remaining = deadline - (time.monotonic() - began)
    if remaining <= 0:
        raise DeadlinePassed(f"{target.host}: no answer within the deadline ({deadline:g} s)")
    connection = _connection(target, remaining, ssl_context)
    sent = {"Host": _host_header(target), "Accept-Encoding": "identity", "Connection": "close", **(headers or {})}
    try:
        with _Watchdog(connection, remaining) as watchdog:
            try:
                connection.request(method, target.path, body=body, headers=sent, preload_content=False)
                response = connection.getresponse()
                content = _read_capped(response, max_body_bytes) if read_body else b""
            except (OSError, HTTPError, http.client.HTTPException, ValueError) as error:
                if watchdog.fired or time.monotonic() - began >= deadline:
                    raise DeadlinePassed(f"{target.host}: no answer within the deadline ({deadline:g} s)") from None
                raise OutboundUnreachable(f"{target.host}: {type(error).__name__}: {error}") from None
            if watchdog.fired:
                raise DeadlinePassed(f"{target.host}: no answer within the deadline ({deadline:g} s)")
    finally:
        connection.close()
    return Answer(response.status, response.headers, content)


def _connection(target: Target, timeout: float, ssl_context: ssl.SSLContext | None) -> HTTPConnection:
    if target.scheme == "https":
        return HTTPSConnection(
            str(target.address),
            target.port,
            timeout=timeout,
            server_hostname=target.host,
            assert_hostname=target.host,
            ssl_context=ssl_context,
        )
    return HTTPConnection(str(target.address), target.port, timeout=timeout)


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == DEFAULT_PORTS[target.scheme] else f"{host}:{target.port}"


def _read_capped(response: Any, cap: int) -> bytes:
    """The body, read in chunks; AnswerTooLarge as soon as it passes `cap` (or says it will)."""
    declared = response.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise AnswerTooLarge(f"the answer's body is {declared} bytes, over the cap of {cap}")
    chunks, size = [], 0
    while chunk := response.read(CHUNK):
        size += len(chunk)
        if size > cap:
            raise AnswerTooLarge(f"the answer's body is over the cap of {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
