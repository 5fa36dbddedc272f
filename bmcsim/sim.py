"""The running simulator: settings, fleet, PKI, sessions and tenant nodes' sshd, shared by every HTTP handler."""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiohttp import web

from .auth import Auth
from .pki import PKI
from .settings import Settings, layout
from .sshd import TenantSSH
from .state import Fleet
from .store import Store


class Simulator:
    """Everything a request may touch; the clock and time scale live here so handlers stay thin."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = Store(settings.data_dir)
        self.fleet = Fleet(layout(settings), self.store)
        self.pki = PKI(settings.data_dir, self.store)
        self.auth = Auth(self.fleet, settings.username, settings.password)
        self.tenant_ssh = TenantSSH(self.fleet, settings.ssh_port, self.now)
        self._faults_cleared = asyncio.Event()

    @staticmethod
    def now() -> float:
        return time.time()

    @property
    def scale(self) -> float:
        return self.settings.scale

    def faults_cleared(self) -> None:
        """Wake every request hanging on a `bmc_timeout` fault so it can look again."""
        self._faults_cleared.set()
        self._faults_cleared = asyncio.Event()

    async def wait_for_clear(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._faults_cleared.wait(), timeout)

    def close(self) -> None:
        self.fleet.flush()
        self.store.close()


SIM = web.AppKey("sim", Simulator)
