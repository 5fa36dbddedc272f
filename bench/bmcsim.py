"""Benchmark bmcsim: memory of a 10,000-node fleet, System GETs per second, metrics render time.

Starts bmcsim as the tests do (a subprocess on a free loopback port) with a throw-away data
directory, loads it from this process for a bounded time, and prints one table. Targets from
issue 3: < 500 MB RSS, >= 1,000 GET/s with 8 concurrent clients, < 5 ms per node's metrics.
Run from the repository root: .venv/bin/python -m bench.bmcsim [--nodes N] [--seconds S] [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import ssl
import tempfile
import time
from pathlib import Path

import aiohttp

from core.metrics_ca import MetricsCA
from tests.support.bmcsim import OPERATOR, Bmcsim, start_bmcsim

CLIENTS = 8
AUTH = {"Authorization": "Basic " + base64.b64encode(":".join(OPERATOR).encode()).decode()}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def system_gets(session: aiohttp.ClientSession, url: str, names: list[str], seconds: float) -> tuple[float, int]:
    """CLIENTS workers GET random Systems for `seconds`; returns (requests/s, errors)."""
    done = errors = 0
    deadline = time.monotonic() + seconds

    async def worker():
        nonlocal done, errors
        rng = random.Random()
        while time.monotonic() < deadline:
            async with session.get(f"{url}/redfish/v1/Systems/{rng.choice(names)}", headers=AUTH) as r:
                await r.read()
                done += 1
                errors += r.status != 200

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    return done / (time.monotonic() - started), errors


def as_prometheus(ca: MetricsCA) -> ssl.SSLContext:
    """TLS as Prometheus scrapes the agents: bmcsim's certificate checked, the client certificate shown."""
    context = ssl.create_default_context(cafile=ca.ca_cert)
    context.load_cert_chain(ca.prometheus_cert, ca.prometheus_key)
    return context


async def metrics_latency(
    session: aiohttp.ClientSession, sim: Bmcsim, names: list[str], samples: int
) -> tuple[float, float]:
    """Sequential metrics scrapes of `samples` different nodes over bmcsim's TLS listener, as
    Prometheus makes them: (mean ms, p95 ms), HTTP round trip included, on connections kept open."""
    timings = []
    prometheus = as_prometheus(sim.metrics_ca)
    for name in random.Random(1).sample(names, min(samples, len(names))):
        started = time.perf_counter()
        async with session.get(f"{sim.metrics_url}/agent/{name}/metrics", ssl=prometheus) as r:
            await r.read()
            assert r.status == 200, r.status
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return sum(timings) / len(timings), timings[int(0.95 * len(timings))]


async def load(sim: Bmcsim, seconds: float, samples: int) -> tuple[list[str], float, int, float, float]:
    """The inventory's names, System GETs/s and errors, metrics mean and p95 ms."""
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(sim.url + "/bmcsim/v1/inventory") as r:
            names = [n["name"] for n in (await r.json())["nodes"]]
        rate, errors = await system_gets(session, sim.url, names, seconds)
        mean_ms, p95_ms = await metrics_latency(session, sim, names, samples)
    return names, rate, errors, mean_ms, p95_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="of System GETs")
    parser.add_argument("--samples", type=int, default=200, help="nodes whose metrics are timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.monotonic()
        sim = start_bmcsim(Path(scratch) / "data", nodes=args.nodes, timeout=60)
        startup = time.monotonic() - started
        try:
            names, rate, errors, mean_ms, p95_ms = asyncio.run(load(sim, args.seconds, args.samples))
            rss = rss_mb(sim.process.popen.pid)
        finally:
            sim.stop()
    rows = [
        ("nodes", f"{len(names):,}", ""),
        ("start-up to first answer", f"{startup:.2f} s", ""),
        ("RSS after the load", f"{rss:.0f} MB", "< 500 MB"),
        (f"System GETs/s, {CLIENTS} concurrent clients", f"{rate:,.0f} ({errors} errors)", ">= 1,000"),
        ("metrics of one node, mean", f"{mean_ms:.2f} ms", "< 5 ms"),
        ("metrics of one node, p95", f"{p95_ms:.2f} ms", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'bmcsim':<{width}}  {'measured':>22}  target")
    for name, measured, target in rows:
        print(f"{name:<{width}}  {measured:>22}  {target}")


if __name__ == "__main__":
    main()
