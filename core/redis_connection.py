"""Every connection the control plane opens to Redis (Celery's own aside, which kombu opens from
the same settings): the broker's marks, /healthz's check and Django's cache.

REDIS_URL is either one Redis, `redis://[:password@]host:port/db` as redis-py reads it, or the
master a group of Sentinels watches, in kombu's form for Celery's broker:
`sentinel://[:password@]host:port;sentinel://[:password@]host:port/db`, the master's name in
GPUFLEET_REDIS_SENTINEL_MASTER and the Sentinels' own password, if they have one, in
GPUFLEET_REDIS_SENTINEL_PASSWORD. Through Sentinels each new connection asks them where the
master is now, so after a failover the next command reaches the replica they promoted; what the
old master had not yet passed on to it is lost, as in a restart (the reconciler sends it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from django.conf import settings
from redis.sentinel import Sentinel, SentinelConnectionPool

SENTINEL_SCHEME = "sentinel"
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelURL:
    """A sentinel:// REDIS_URL: the Sentinels to ask, and the database and credentials on the master."""

    sentinels: tuple[tuple[str, int], ...]
    db: int
    username: str | None
    password: str | None


def sentinel_url(url: str) -> SentinelURL | None:
    """`url` read as kombu reads it if it is a Sentinel URL (None if it is not): each Sentinel as
    sentinel://[:password@]host:port[/db], `;` between them. Each must name the same database
    (none is 0) and the same credentials: kombu takes them from whichever Sentinel it asks at the
    time. A ValueError says what is wrong."""
    parts = [urlsplit(part) for part in url.split(";")]
    schemes = {part.scheme for part in parts}
    if SENTINEL_SCHEME not in schemes:
        return None
    if schemes != {SENTINEL_SCHEME}:
        raise ValueError("expected every URL between the ;s to be sentinel://host:port")
    sentinels = []
    dbs: set[int] = set()
    credentials: set[tuple[str | None, str | None]] = set()
    for part in parts:
        try:
            port = part.port or SENTINEL_PORT
        except ValueError:  # urllib's own message names no URL
            raise ValueError(f"a Sentinel on {part.hostname}: expected its port, a number up to 65535") from None
        if not part.hostname:
            raise ValueError("expected sentinel://host:port for each Sentinel")
        sentinels.append((part.hostname, port))
        database = part.path.strip("/")
        if database and not database.isdigit():
            raise ValueError(f"the database is {database!r}: expected a number, as in sentinel://host:port/0")
        dbs.add(int(database or 0))
        credentials.add((unquote(part.username) if part.username else None, unquote(part.password or "") or None))
    if len(dbs) > 1:
        raise ValueError(f"the Sentinels name databases {sorted(dbs)}: expected one, the same on each (none is 0)")
    if len(credentials) > 1:
        raise ValueError("the Sentinels have different passwords: expected the master's on each, or on none")
    return SentinelURL(tuple(sentinels), dbs.pop(), *credentials.pop())


def url_problem(url: str, master: str) -> str | None:
    """Why REDIS_URL `url` cannot work with the master's name `master`, naming the variable (and
    never the URL's value: it may hold a password); None if it can."""
    try:
        address = sentinel_url(url)
    except ValueError as problem:
        return f"REDIS_URL: {problem}"
    if address and not master:
        return "REDIS_URL is a sentinel:// URL: expected GPUFLEET_REDIS_SENTINEL_MASTER, its master's name"
    return None


def sentinel_options(connection_options: dict[str, Any], password: str) -> dict[str, Any]:
    """How to reach the Sentinels themselves (redis-py's and kombu's `sentinel_kwargs`): with the
    socket timeouts of the connections to the master, and the Sentinels' password if they have one.
    No retries: a Sentinel that does not answer is passed over for the next at once, where redis-py's
    default would try it again for seconds, on every connection (one lost with its master's machine)."""
    options = {name: value for name, value in connection_options.items() if name.startswith("socket_")}
    return options | {"retry": None} | ({"password": password} if password else {})


def connection_pool(url: str, **options: Any) -> redis.ConnectionPool:
    """A pool of connections to the Redis at `url` (a redis:// or a sentinel:// URL), each made
    with `options` (redis-py's connection arguments, such as socket_timeout)."""
    address = sentinel_url(url)
    if address is None:
        return redis.ConnectionPool.from_url(url, **options)
    # redis-py leaves its Sentinel classes unannotated.
    sentinels = Sentinel(  # type: ignore[no-untyped-call]
        list(address.sentinels), sentinel_kwargs=sentinel_options(options, settings.REDIS_SENTINEL_PASSWORD)
    )
    return SentinelConnectionPool(  # type: ignore[no-untyped-call]
        settings.REDIS_SENTINEL_MASTER,
        sentinels,
        db=address.db,
        username=address.username,
        password=address.password,
        **options,
    )


def redis_client(url: str, **options: Any) -> redis.Redis:
    """A client of the Redis at `url` (see `connection_pool`); closing it closes its connections to it."""
    return redis.Redis.from_pool(connection_pool(url, **options))


class CachePool:
    """The `pool_class` of Django's Redis cache (settings.CACHES): its connections made here too,
    so that its LOCATION may be a Sentinel URL."""

    from_url = staticmethod(connection_pool)
