"""The tenants' CLI against a real control plane: pytest-django's live server (the project's
URLconf, /v1 included) on the test database, a tenant's API key, and the CLI's main(argv) run in
the tenant's environment, in this process, or the installed console script in a process of its own
where a test needs one (one that is still running, or the script itself)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import pytest
from gpufleet_client.cli import main

from tests.support.api import member_key

GPUFLEET = Path(sys.executable).parent / "gpufleet"  # the console script `pip install -e ./client` puts there


# What the CLI reads from its environment (gpufleet_client/config.py).
CLI_VARIABLES = ("GPUFLEET_URL", "GPUFLEET_KEY", "GPUFLEET_TOKEN", "XDG_CONFIG_HOME", "HOME")


@dataclass(frozen=True)
class Completed:
    """What one command left: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Tenant:
    """How a tenant calls the CLI: its environment (server, token, an empty config directory)."""

    env: dict[str, str]

    def run(self, *args: str, env: dict[str, str] | None = None) -> Completed:
        """`gpufleet ARGS`: the console script's main(ARGS) in this process, in the tenant's
        environment (with `env` over it), what it prints captured. A process of its own would cost
        a third of a second a command; test_client_package.py runs the installed script."""
        environment = {**self.env, **(env or {})}
        stdout, stderr = io.StringIO(), io.StringIO()
        with patch.dict(os.environ), redirect_stdout(stdout), redirect_stderr(stderr):
            for name in CLI_VARIABLES:
                if name in environment:
                    os.environ[name] = environment[name]
                else:
                    os.environ.pop(name, None)
            status = main(list(args))
        return Completed(status, stdout.getvalue(), stderr.getvalue())

    def popen(self, *args: str) -> subprocess.Popen:
        """`gpufleet ARGS` still running, the console script installed in the virtualenv."""
        assert GPUFLEET.exists(), f"{GPUFLEET} is missing: pip install -e ./client (make setup does)"
        return subprocess.Popen(
            [str(GPUFLEET), *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def tenant_environment(tmp_path: Path, url: str, token: str | None) -> dict[str, str]:
    # The key in GPUFLEET_TOKEN, its older name, which the CLI still reads: test_cli_keys.py gives GPUFLEET_KEY.
    """A clean environment: no proxy, no config of the developer's own (HOME and XDG_CONFIG_HOME are empty)."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env["GPUFLEET_URL"] = url
    if token is not None:
        env["GPUFLEET_TOKEN"] = token
    return env


def with_key(tmp_path: Path, url: str, key: str | None) -> Tenant:
    """A caller of the CLI with `key` in GPUFLEET_KEY (no GPUFLEET_TOKEN, no config file; none: no key anywhere)."""
    env = tenant_environment(tmp_path, url, None)
    if key is not None:
        env["GPUFLEET_KEY"] = key
    return Tenant(env)


def admin_key(tenant: str) -> str:
    """The key of the organisation's admin, who may do all a tenant does (webhooks and keys are an
    admin's; the organisation key `manage.py create_tenant` prints acts as a member)."""
    return member_key(tenant, f"{tenant}-admin", "admin")


@pytest.fixture
def acme(live_server, tmp_path) -> Tenant:
    return Tenant(tenant_environment(tmp_path / "acme", live_server.url, admin_key("acme")))


@pytest.fixture
def globex(live_server, tmp_path) -> Tenant:
    return Tenant(tenant_environment(tmp_path / "globex", live_server.url, admin_key("globex")))


@pytest.fixture
def anonymous(live_server, tmp_path) -> Tenant:
    """No token anywhere: neither in the environment nor in a config file."""
    return Tenant(tenant_environment(tmp_path / "anonymous", live_server.url, None))
