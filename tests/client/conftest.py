"""The tenants' CLI against a real control plane: pytest-django's live server (the project's
URLconf, /v1 included) on the test database, a tenant's token, and the CLI run as a tenant runs
it, in a process of its own, or in process through main(argv)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpufleet_client.cli import main

from tests.support.factories import tenant_token

GPUFLEET = Path(sys.executable).parent / "gpufleet"  # the console script `pip install -e ./client` puts there


@dataclass
class Tenant:
    """How a tenant calls the CLI: its environment (server, token, an empty config directory)."""

    env: dict[str, str]

    def run(self, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
        """`gpufleet ARGS` as a subprocess, the console script installed in the virtualenv."""
        assert GPUFLEET.exists(), f"{GPUFLEET} is missing: pip install -e ./client (make setup does)"
        return subprocess.run(
            [str(GPUFLEET), *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            **kwargs,
        )

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(GPUFLEET), *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def main(self, *args: str, monkeypatch: pytest.MonkeyPatch) -> int:
        """`main(ARGS)` in this process, with the tenant's environment."""
        for name in ("GPUFLEET_URL", "GPUFLEET_TOKEN", "XDG_CONFIG_HOME", "HOME"):
            if name in self.env:
                monkeypatch.setenv(name, self.env[name])
            else:
                monkeypatch.delenv(name, raising=False)
        return main(list(args))


def tenant_environment(tmp_path: Path, url: str, token: str | None) -> dict[str, str]:
    """A clean environment: no proxy, no config of the developer's own (HOME and XDG_CONFIG_HOME are empty)."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env["GPUFLEET_URL"] = url
    if token is not None:
        env["GPUFLEET_TOKEN"] = token
    return env


@pytest.fixture
def acme(live_server, tmp_path) -> Tenant:
    return Tenant(tenant_environment(tmp_path / "acme", live_server.url, tenant_token("acme")))


@pytest.fixture
def globex(live_server, tmp_path) -> Tenant:
    return Tenant(tenant_environment(tmp_path / "globex", live_server.url, tenant_token("globex")))


@pytest.fixture
def anonymous(live_server, tmp_path) -> Tenant:
    """No token anywhere: neither in the environment nor in a config file."""
    return Tenant(tenant_environment(tmp_path / "anonymous", live_server.url, None))
