"""A Redis master and its replica watched by three Sentinels (quorum 2), as real processes on
free loopback ports: the tests' and the soak's Redis failover. Debian's redis-server runs both
kinds (`redis-server sentinel.conf --sentinel`). A master that stops answering is down after
DOWN_AFTER_MS for each Sentinel; a failover then takes a few seconds more (an election, the
replica promoted)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

import redis

from tests.support.ports import free_port
from tests.support.processes import Process, tool, wait_for

MASTER_NAME = "gpufleet"
QUORUM = 2
DOWN_AFTER_MS = 1000
# Also how long a Sentinel waits before it tries again after an election nobody won: short, so
# that one split vote costs seconds, not minutes (Redis's default is 3 minutes).
FAILOVER_TIMEOUT_MS = 2000


def sentinel_url(ports: Iterable[int]) -> str:
    """REDIS_URL in kombu's form: the Sentinels on these loopback ports, database 0."""
    return ";".join(f"sentinel://127.0.0.1:{port}" for port in ports) + "/0"


class SentinelCluster:
    """Started on construction; `url` and `env()` are how the control plane is given it. Its
    Sentinels listen on `sentinel_ports` (the soak names its URL before it starts them) or on
    three free ports."""

    def __init__(self, log_dir: Path, sentinel_ports: Sequence[int] = ()):
        self.dir = log_dir / "redis-sentinel"
        self.dir.mkdir(exist_ok=True)
        self.redis: dict[int, Process] = {}  # by port, master and replicas alike
        self.sentinels: dict[int, Process] = {}
        self._clients: dict[int, redis.Redis] = {}
        master = free_port()
        self._start_redis(master)
        replica = free_port()  # once the master listens: never the same port
        self._start_redis(replica, replica_of=master)
        wait_for("the replica to sync", lambda: self._info(replica).get("master_link_status") == "up", timeout=10)
        for port in sentinel_ports or (free_port() for _ in range(3)):
            self._start_sentinel(port, master)
        self.wait_until_watched()

    @property
    def url(self) -> str:
        """REDIS_URL in kombu's form: every Sentinel, database 0."""
        return sentinel_url(self.sentinels)

    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.url, "GPUFLEET_REDIS_SENTINEL_MASTER": MASTER_NAME}

    def master(self) -> int:
        """The master's port, as every Sentinel names it."""
        named = {self._named_master(port) for port in self.sentinels}
        if len(named) != 1:
            raise AssertionError(f"the Sentinels disagree on the master: {sorted(named)}")
        return named.pop()

    def client(self) -> redis.Redis:
        """A client of the master now (a test's look at what the control plane wrote)."""
        return self._client(self.master())

    def kill_master(self) -> int:
        """SIGKILL the master, as a lost machine; its port."""
        port = self.master()
        self.redis.pop(port).kill()
        return port

    def wait_for_new_master(self, old: int, timeout: float = 15) -> int:
        """Once every Sentinel names a master other than `old` and it says it is one: its port."""

        def promoted() -> bool:
            named = {self._named_master(port) for port in self.sentinels}
            return len(named) == 1 and old not in named and self._info(named.pop()).get("role") == "master"

        wait_for("the Sentinels to promote a replica", promoted, timeout=timeout, interval=0.05)
        return self.master()

    def restart_as_replica(self, port: int) -> None:
        """Start the Redis on `port` again, as the master's replica; once every Sentinel counts it."""
        self._start_redis(port, replica_of=self.master())
        wait_for("the old master to sync", lambda: self._info(port).get("master_link_status") == "up", timeout=10)
        self.wait_until_watched()

    def wait_until_watched(self, timeout: float = 20) -> None:
        """Until each Sentinel knows every replica and every other Sentinel: only then can they
        agree that the master is down and elect one of them to fail it over."""

        def watched() -> bool:
            replicas = set(self.redis) - {self.master()}
            for port in self.sentinels:
                sentinel = self._client(port)
                # A replica the Sentinel has heard from since it last changed, linked to the master.
                synced = {r["port"] for r in sentinel.sentinel_slaves(MASTER_NAME) if _in_sync(r)}
                others = cast(dict, sentinel.sentinel_master(MASTER_NAME))["num-other-sentinels"]
                if synced != replicas or others != len(self.sentinels) - 1:
                    return False
            return True

        wait_for("the Sentinels to see one another and the replicas", watched, timeout=timeout, interval=0.2)

    def stop(self) -> None:
        for client in self._clients.values():
            client.close()
        for process in [*self.sentinels.values(), *self.redis.values()]:
            process.stop()

    def _start_redis(self, port: int, replica_of: int | None = None) -> None:
        args = [tool("redis-server"), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        args += ["--repl-diskless-sync-delay", "0"]  # a replica's first sync at once, not after 5 s
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.redis[port] = Process(f"redis-{port}", [*args, "--dir", str(self.dir)], os.environ.copy(), self.dir)
        wait_for(f"redis on {port}", lambda: _pings(self._client(port)), timeout=10)

    def _start_sentinel(self, port: int, master: int) -> None:
        config = self.dir / f"sentinel-{port}.conf"  # a Sentinel writes what it learns into its file
        config.write_text(
            f"bind 127.0.0.1\nport {port}\ndir {self.dir}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
        )
        self.sentinels[port] = Process(
            f"sentinel-{port}", [tool("redis-server"), str(config), "--sentinel"], os.environ.copy(), self.dir
        )
        wait_for(f"sentinel on {port}", lambda: _pings(self._client(port)), timeout=10)

    def _client(self, port: int) -> redis.Redis:
        """One client per Redis or Sentinel, which connects again after a restart."""
        if port not in self._clients:
            self._clients[port] = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
        return self._clients[port]

    def _named_master(self, port: int) -> int:
        """The master's port, as the Sentinel on `port` names it."""
        _, master = cast(tuple[str, int], self._client(port).sentinel_get_master_addr_by_name(MASTER_NAME))
        return master

    def _info(self, port: int) -> dict:
        try:
            return self._client(port).info("replication")
        except redis.RedisError:
            return {}


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _in_sync(replica: dict) -> bool:
    """A replica as a Sentinel sees it (SENTINEL REPLICAS): up, and its link to the master up."""
    return not (replica["is_sdown"] or replica["is_disconnected"]) and replica["master-link-status"] == "ok"
