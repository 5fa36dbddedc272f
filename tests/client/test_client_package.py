"""The gpufleet-client distribution: pinned as the repository pins, installed by `make setup`,
documented, apart from the control plane, and with no copy of the offline verifier."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

from gpufleet_client.cli import build_parser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.client.conftest import GPUFLEET
from tests.support import REPO_ROOT

CLIENT = REPO_ROOT / "client"
PACKAGE = CLIENT / "gpufleet_client"


def pins(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            found[canonicalize_name(requirement.name)] = specifier.version
    return found


def test_the_clients_pins_are_the_repositorys_and_closed_under_their_dependencies():
    client, runtime = pins(CLIENT / "requirements.txt"), pins(REPO_ROOT / "requirements.txt")
    assert {name: runtime.get(name) for name in client} == client
    for name in client:
        for text in distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            assert canonicalize_name(requirement.name) in client, f"{name} needs {requirement}"


def test_make_setup_installs_it_editable_and_puts_gpufleet_on_the_path():  # and the Docker image, from requirements.txt
    assert "-e ./client" in (REPO_ROOT / "requirements.txt").read_text().splitlines()
    assert distribution("gpufleet-client").version == "0.1.0"
    completed = subprocess.run([str(GPUFLEET), "--version"], capture_output=True, text=True, timeout=30)
    assert completed.stdout == "gpufleet 0.1.0\n"


def commands() -> list[str]:
    """Every command and webhook command, as `gpufleet --help` lists them."""
    (top,) = [a for a in build_parser()._actions if a.choices and "reserve" in a.choices]
    assert isinstance(top.choices, dict)  # a subcommand's parser by its name
    names = [name for name in top.choices if name != "webhooks"]
    (hooks,) = [a for a in top.choices["webhooks"]._actions if a.choices and "add" in a.choices]
    assert hooks.choices is not None
    return [*names, "webhooks", *(f"webhooks {name}" for name in hooks.choices)]


def test_the_readme_shows_every_command_and_the_exit_statuses():
    readme = (CLIENT / "README.md").read_text()
    for command in commands():
        assert re.search(rf"^gpufleet {command}\b", readme, re.MULTILINE), command
    for status in range(5):
        assert f"| {status} |" in readme


def test_the_client_imports_nothing_of_the_control_plane():
    """A tenant's program, installed on its own: no Django, nothing of the control plane."""
    first_party = {
        "gpufleet",
        "console",
        "workflows",
        "reservations",
        "remediation",
        "fleet",
        "core",
        "bmcsim",
        "attestation",
    }
    for source in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module is not None  # only a relative import may name no module
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in first_party | {"django", "rest_framework", "celery"}, (source, name)
    blocked = (
        "import sys; sys.modules.update(django=None, rest_framework=None, attestation=None); import gpufleet_client.cli"
    )
    completed = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr


def test_the_offline_verifier_exists_once_in_the_client():
    """The checks a tenant runs are the control plane's: no module of attestation/ defines one, and
    `python -m attestation.verify` is the client's main."""
    checks = {"verify_result", "_public_key", "check_result", "not_as_asked", "contraindicated", "nonce_readings"}
    defined = {
        node.name
        for source in (REPO_ROOT / "attestation").rglob("*.py")
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.FunctionDef)
    }
    assert not defined & checks
    verifier = ast.parse((PACKAGE / "offline_verification.py").read_text())
    assert checks <= {node.name for node in ast.walk(verifier) if isinstance(node, ast.FunctionDef)}
    assert "from gpufleet_client.offline_verification import main" in (REPO_ROOT / "attestation/verify.py").read_text()
