"""requirements.txt is what the running system needs and all of it, pinned; requirements-dev.txt adds the rest;
agent/requirements.txt is the node agent's own part of requirements.txt, at the same versions.

The Docker image installs requirements.txt alone, so an import in production code that only
the development pins bring, or a dependency of a runtime package left unpinned, would break
the image and not the tests. These read the installed distributions' own metadata.
"""

from __future__ import annotations

import ast
import sys
from importlib.metadata import distribution, distributions, packages_distributions
from pathlib import Path

import pytest
from django.conf import settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

BASE_DIR = settings.BASE_DIR
RUNTIME = BASE_DIR / "requirements.txt"
DEVELOPMENT = BASE_DIR / "requirements-dev.txt"
AGENT = BASE_DIR / "agent" / "requirements.txt"
PRODUCTION_CODE = (
    "agent",
    "core",
    "gpufleet",
    "console",
    "workflows",
    "fleet",
    "reservations",
    "attestation",
    "remediation",
    "bmcsim",
    "client",
    "manage.py",
)
FIRST_PARTY = {*PRODUCTION_CODE, "gpufleet_client", "tests", "bench"} - {"manage.py", "client"}
# Installed by the venv itself, not by either file.
TOOLING = {"pip", "setuptools", "wheel"}
EDITABLE = {"gpufleet-client"}  # requirements.txt installs it from the checkout (-e ./client)


def requirements(path: Path) -> dict[str, Requirement]:
    found: dict[str, Requirement] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith(("-r ", "-e ")):
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = requirement
    return found


def pins(path: Path) -> dict[str, str]:
    """Each package's pinned version; every line must pin exactly one."""
    found = {}
    for name, requirement in requirements(path).items():
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", str(requirement)
        found[name] = specifier.version
    return found


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The imports under `if TYPE_CHECKING:`, which only the type checker runs."""
    guarded = (n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING"))
    return {node for block in guarded for statement in block.body for node in ast.walk(statement)}


def production_imports(roots: tuple[str, ...] = PRODUCTION_CODE) -> set[str]:
    modules: set[str] = set()
    for root in roots:
        path = BASE_DIR / root
        for source in [path] if path.is_file() else path.rglob("*.py"):
            tree = ast.parse(source.read_text(), str(source))
            for node in set(ast.walk(tree)) - _type_checking_only(tree):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    assert node.module is not None  # only a relative import may name no module
                    modules.add(node.module.split(".")[0])
    if roots == PRODUCTION_CODE:
        # Apps and middleware that the settings name as strings.
        modules.update(name.split(".")[0] for name in [*settings.INSTALLED_APPS, *settings.MIDDLEWARE])
    return modules - set(sys.stdlib_module_names) - FIRST_PARTY


def test_every_line_is_pinned_and_no_package_is_in_both_files():
    runtime, development = pins(RUNTIME), pins(DEVELOPMENT)
    assert DEVELOPMENT.read_text().count("-r requirements.txt") == 1
    assert not set(runtime) & set(development)


def test_every_installed_package_is_pinned_at_its_installed_version():
    wanted = {**pins(RUNTIME), **pins(DEVELOPMENT)}
    installed: dict[str, str] = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    unpinned = {
        name: version for name, version in installed.items() if name not in wanted and name not in TOOLING | EDITABLE
    }
    assert not unpinned, f"installed but pinned nowhere: {unpinned}"
    drifted = {name: (wanted[name], installed.get(name)) for name in wanted if installed.get(name) != wanted[name]}
    assert not drifted, f"pinned version differs from the installed one: {drifted}"


def test_production_code_imports_only_what_requirements_txt_installs():
    runtime = pins(RUNTIME)
    owners = packages_distributions()
    missing = {
        module: owners.get(module)
        for module in production_imports()
        if not any(canonicalize_name(owner) in runtime for owner in owners.get(module, []))
    }
    assert not missing, f"imported by production code, not in requirements.txt: {missing}"


def test_the_agents_pins_are_requirements_txts_and_cover_what_the_agent_imports():
    agent, runtime = pins(AGENT), pins(RUNTIME)
    assert {name: runtime.get(name) for name in agent} == agent
    owners = packages_distributions()
    missing = {
        module: owners.get(module)
        for module in production_imports(("agent",))
        if not any(canonicalize_name(owner) in agent for owner in owners.get(module, []))
    }
    assert not missing, f"imported by the agent, not in agent/requirements.txt: {missing}"


@pytest.mark.parametrize("path", [RUNTIME, AGENT], ids=["requirements.txt", "agent"])
def test_requirements_are_closed_under_their_packages_dependencies(path):
    runtime = requirements(path)
    unpinned = set()
    for name, pinned in runtime.items():
        environments = [{"extra": extra} for extra in pinned.extras] or [{"extra": ""}]
        for text in distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker and not any(requirement.marker.evaluate(env) for env in environments):
                continue
            if canonicalize_name(requirement.name) not in runtime:
                unpinned.add(f"{name} needs {requirement}")
    assert not unpinned, sorted(unpinned)
