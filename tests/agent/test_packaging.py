"""gpu-agent installs on a server as its own program: a wheel of the agent package alone, into a
virtualenv that has agent/requirements.txt and nothing of the control plane, runs as `gpu-agent`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv

import pytest
import requests

from tests.support.ports import free_port
from tests.support.processes import REPO_ROOT, Process, answers, once_ready

TOKEN = "a-node-token-of-at-least-16-characters"


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.e2e
def test_the_wheel_installs_and_serves_with_only_the_agents_dependencies(tmp_path):
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", source)
    shutil.copytree(REPO_ROOT / "agent", source / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(source)
    )
    (wheel,) = (tmp_path / "dist").glob("gpu_agent-*.whl")

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    pip = [str(environment / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run(*pip, "--requirement", str(REPO_ROOT / "agent" / "requirements.txt"))
    run(*pip, "--no-deps", str(wheel))
    installed = run(str(environment / "bin" / "python"), "-m", "pip", "list", "--format=freeze").stdout
    assert "Django" not in installed and "celery" not in installed

    (tmp_path / "token").write_text(TOKEN)
    port = free_port()
    process = Process(
        "gpu-agent-installed",
        [str(environment / "bin" / "gpu-agent"), "--backend", "sim", "--listen", f"127.0.0.1:{port}"],
        {"PATH": "/usr/bin:/bin", "GPU_AGENT_TOKEN_FILE": str(tmp_path / "token")},
        tmp_path,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        once_ready(process, "the installed agent", lambda: answers(url), timeout=20)
        answer = requests.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert answer.status_code == 200 and "DCGM_FI_DEV_GPU_TEMP" in answer.text
    finally:
        process.stop()
