"""The sshd of every node that runs the tenant OS: a real SSH server (asyncssh) on bmcsim's event loop.

It listens on the node's address from its config drive, if that is a loopback address, and
BMCSIM_SSH_PORT, from the moment the OS is up until the node powers off, boots something else or
bmcsim stops; bmcsim starting again starts it again from the node's persisted state. Only public
keys are accepted, exactly the authorized keys of the config drive, under any user name. An exec
channel answers a few commands; anything else exits 127.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import asyncssh

from . import guest
from .state import Fleet, NodeState

LOGIN_TIMEOUT_S = 30
NOT_SIMULATED = 127  # a shell's "command not found"


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
                    process_factory=functools.partial(_answer, tenant),
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


def _answer(tenant: dict, process: asyncssh.SSHServerProcess) -> None:
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
    else:
        process.stderr.write(f"bmcsim: {command or 'an interactive shell'}: command not simulated\n")
        process.exit(NOT_SIMULATED)
