"""The sshd of every node that runs the tenant OS: a real SSH server (asyncssh) on bmcsim's event loop.

It listens on the node's address from its config drive, if that is a loopback address, and
BMCSIM_SSH_PORT, from the moment the OS is up until the node powers off, boots something else or
bmcsim stops; bmcsim starting again starts it again from the node's persisted state. Only public
keys are accepted, exactly the authorized keys of the config drive, under any user name. An exec
channel answers a few commands; anything else exits 127. Among them the tenant's probes of the
fabrics, answered from the managers' state (reachability.py) as the real tools answer:
`ping -c COUNT [-W SECONDS] ADDRESS` (iputils), `ibping -c COUNT -G GUID` (infiniband-diags) and
`nvlink-peers` (the GPU UUIDs of other nodes this node's GPUs reach over NVLink, one a line).
"""

from __future__ import annotations

import asyncio
import functools
import getopt
import ipaddress
import re
import shlex
from collections.abc import Callable

import asyncssh

from . import guest, reachability
from .state import Fleet, NodeState

LOGIN_TIMEOUT_S = 30
NOT_SIMULATED = 127  # a shell's "command not found"
UNREACHED, USAGE = 1, 2  # what ping and ibping exit with when nothing answers, and on bad arguments
MAX_COUNT = 100
GUID = re.compile(r"(0x)?[0-9a-fA-F]{1,16}")
PING_USAGE = "Usage: ping -c COUNT [-W TIMEOUT] ADDRESS (bmcsim simulates these options only)\n"
IBPING_USAGE = "Usage: ibping -c COUNT -G GUID (bmcsim simulates port GUIDs only)\n"
NVLINK_PEERS_USAGE = "Usage: nvlink-peers (no arguments)\n"
Answer = tuple[int, str, str]  # exit status, stdout, stderr


class TenantSSH:
    """One task per node whose sshd runs or is to run once its OS is up; cancelling the task stops it."""

    def __init__(self, fleet: Fleet, port: int, clock: Callable[[], float]):
        self.fleet = fleet
        self.port = port
        self.clock = clock
        self._tasks: dict[str, asyncio.Task] = {}

    async def start(self) -> None:
        """At bmcsim's start: every node that runs the tenant OS gets its sshd again."""
        for node in self.fleet.nodes.values():
            if node.guest is not None:
                await self.sync(node)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def sync(self, node: NodeState) -> None:
        """Match the node's sshd to its state after a power or boot transition: stop what ran, and
        start what should run, once the OS is up. Returns once the old sshd is stopped and, if the OS
        is already up, the new one listens (or failed to)."""
        previous = self._tasks.pop(node.name, None)
        if previous is not None:
            previous.cancel()
        tenant = node.guest
        if not (node.power_on and tenant and guest.is_loopback(tenant["address"])):
            if previous is not None:
                await asyncio.wait([previous])
            return
        listening = asyncio.get_running_loop().create_future()
        # Registered before any await, so that a concurrent transition of the same node cancels this one.
        task = asyncio.create_task(self._serve(node, tenant, previous, listening))
        self._tasks[node.name] = task
        task.add_done_callback(functools.partial(self._forget, node.name))
        waits = [task, listening] if node.booted_at <= self.clock() else [previous] if previous else []
        if waits:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)

    def _forget(self, name: str, task: asyncio.Task) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]

    async def _serve(
        self, node: NodeState, tenant: dict, previous: asyncio.Task | None, listening: asyncio.Future
    ) -> None:
        connections: set[asyncssh.SSHServerConnection] = set()
        server = None
        try:
            if previous is not None:
                await asyncio.wait([previous])  # its address is free again
            await asyncio.sleep(max(0.0, node.booted_at - self.clock()))
            assert node.ssh_host_key is not None, "a tenant OS boots with its host key made"
            try:
                server = await asyncssh.create_server(
                    functools.partial(_Server, connections),
                    tenant["address"],
                    self.port,
                    server_host_keys=[asyncssh.import_private_key(node.ssh_host_key)],
                    authorized_client_keys=asyncssh.import_authorized_keys("\n".join(tenant["authorized_keys"])),
                    process_factory=functools.partial(_answer, _Probes(self.fleet, node.name, self.clock), tenant),
                    password_auth=False,
                    kbdint_auth=False,
                    gss_host=None,
                    allow_pty=False,
                    login_timeout=LOGIN_TIMEOUT_S,
                    reuse_address=True,
                )
            except OSError as error:
                port = f"{self.port} on {tenant['address']}"
                node.console_write([(self.clock(), f"sshd: error: Bind to port {port} failed: {error.strerror}.")])
                self.fleet.touch(node)
                return
            listening.set_result(True)
            await asyncio.Event().wait()  # serve until cancelled
        finally:
            if not listening.done():
                listening.set_result(False)
            if server is not None:
                server.close()
            for connection in list(connections):
                connection.close()


class _Server(asyncssh.SSHServer):
    """Keeps track of its connections, so that a node going down drops them as a real one would."""

    def __init__(self, connections: set[asyncssh.SSHServerConnection]):
        self._connections = connections
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        self._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self._connection)


def _answer(probes: _Probes, tenant: dict, process: asyncssh.SSHServerProcess) -> None:
    command = (process.command or "").strip()
    keys = "".join(f"{key}\n" for key in tenant["authorized_keys"])
    answers = {
        "hostname": f"{tenant['hostname']}\n",
        "cat /etc/gpufleet/image.sha256": f"{tenant['image_sha256']}\n",
        "cat /root/.ssh/authorized_keys": keys,
    }
    if command in answers:
        process.stdout.write(answers[command])
        process.exit(0)
        return
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    probe = probes.commands().get(argv[0]) if argv else None
    if probe is None:
        process.stderr.write(f"bmcsim: {command or 'an interactive shell'}: command not simulated\n")
        process.exit(NOT_SIMULATED)
        return
    status, stdout, stderr = probe(argv[1:])
    process.stdout.write(stdout)
    process.stderr.write(stderr)
    process.exit(status)


class _Probes:
    """The tenant's probes of the fabrics from inside one node, answered from the fleet's state."""

    def __init__(self, fleet: Fleet, node: str, clock: Callable[[], float]):
        self.fleet = fleet
        self.node = node
        self.clock = clock

    def commands(self) -> dict[str, Callable[[list[str]], Answer]]:
        return {"ping": self.ping, "ibping": self.ibping, "nvlink-peers": self.nvlink_peers}

    def ping(self, args: list[str]) -> Answer:
        """iputils' ping, briefly: a reply per packet when the address is reached, none otherwise."""
        try:
            options, operands = getopt.getopt(args, "c:W:")
            given = dict(options)
            count = _count(given.get("-c"))
            if "-W" in given and not _positive_number(given["-W"]):
                return USAGE, "", f"ping: invalid argument: '{given['-W']}'\n"
        except (getopt.GetoptError, ValueError) as error:
            return USAGE, "", f"ping: {error}\n{PING_USAGE}"
        if len(operands) != 1:
            return USAGE, "", PING_USAGE
        (address,) = operands
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return USAGE, "", f"ping: {address}: Name or service not known\n"
        reached = reachability.ping(self.fleet, self.node, address, self.clock())
        replies = [f"64 bytes from {address}: icmp_seq={seq} ttl=64 time=0.050 ms\n" for seq in range(1, count + 1)]
        stdout = (
            f"PING {address} ({address}) 56(84) bytes of data.\n"
            + ("".join(replies) if reached else "")
            + f"\n--- {address} ping statistics ---\n"
            + _statistics(count, reached, "0ms")
        )
        return (0 if reached else UNREACHED), stdout, ""

    def ibping(self, args: list[str]) -> Answer:
        """infiniband-diags' ibping to a port GUID, briefly: a pong per packet when reached, none otherwise."""
        try:
            options, operands = getopt.getopt(args, "c:G")
            given = dict(options)
            count = _count(given.get("-c"))
        except (getopt.GetoptError, ValueError) as error:
            return USAGE, "", f"ibping: {error}\n{IBPING_USAGE}"
        if "-G" not in given or len(operands) != 1 or not GUID.fullmatch(operands[0]):
            return USAGE, "", IBPING_USAGE
        guid = f"{int(operands[0], 16):016x}"
        reached = reachability.ib_reaches(self.fleet, self.node, guid)
        stdout = (
            (f"Pong from 0x{guid}: time 0.050 ms\n" * count if reached else "")
            + f"\n--- 0x{guid} ibping statistics ---\n"
            + _statistics(count, reached, "0 ms")
        )
        return (0 if reached else UNREACHED), stdout, ""

    def nvlink_peers(self, args: list[str]) -> Answer:
        """The UUIDs of other nodes' GPUs in an NVLink partition with this node's, one a line."""
        if args:
            return USAGE, "", NVLINK_PEERS_USAGE
        return 0, "".join(f"{uuid}\n" for uuid in reachability.nvlink_peers(self.fleet, self.node)), ""


def _statistics(count: int, reached: bool, elapsed: str) -> str:
    """The last line of ping's and ibping's statistics: every packet answered, or none."""
    received, loss = (count, 0) if reached else (0, 100)
    return f"{count} packets transmitted, {received} received, {loss}% packet loss, time {elapsed}\n"


def _count(value: str | None) -> int:
    """-c COUNT: required (a probe that never ends has no place in an exec channel), 1 to MAX_COUNT."""
    if value is None:
        raise ValueError("option -c COUNT is required")
    if not value.isdigit() or not 1 <= int(value) <= MAX_COUNT:
        raise ValueError(f"invalid argument: '{value}': out of range: 1 <= value <= {MAX_COUNT}")
    return int(value)


def _positive_number(value: str) -> bool:
    try:
        return float(value) > 0
    except ValueError:
        return False
