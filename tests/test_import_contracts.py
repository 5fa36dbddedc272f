"""The layers hold (.importlinter), and each contract breaks when code crosses it: an upward
import, a cycle between a package's modules, a framework in a pure module, a control-plane
import in bmcsim or in the node agent, the benchmarks in the tests. Each breach is made in a copy
of the packages, never in the tree itself."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "gpufleet",
    "console",
    "workflows",
    "reservations",
    "remediation",
    "attestation",
    "fleet",
    "core",
    "bmcsim",
    "agent",
    "tests",
    "bench",
)
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", str(root / ".importlinter")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_contract_is_kept():
    result = lint_imports(REPO_ROOT)
    assert result.returncode == 0, result.stdout
    assert "Contracts: 8 kept, 0 broken." in result.stdout


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("packages")
    shutil.copy(REPO_ROOT / ".importlinter", root)
    for package in PACKAGES:
        # The tests' data files (schemas, mock-ups) are no Python: left behind.
        shutil.copytree(REPO_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return root


@pytest.fixture
def copy(pristine, tmp_path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    return root


def add_line(root: Path, module: str, line: str) -> None:
    path = root / module
    path.write_text(f"{path.read_text()}\n{line}\n")


@pytest.mark.parametrize(
    ("module", "line", "broken", "says"),
    [
        (
            "fleet/models/__init__.py",
            "from console import metrics",
            "Control-plane layers",
            "fleet.models -> console.metrics",
        ),
        (
            "attestation/services.py",
            "from fleet import models",
            "Attestation knows a node",
            "attestation.services -> fleet.models",
        ),
        (
            "reservations/services/booking.py",
            "from remediation import rules",
            "Control-plane layers",
            "reservations.services.booking -> remediation.rules",
        ),
        ("fleet/leases.py", "from fleet import services", "No import cycles", "No cycles are allowed in fleet"),
        (
            "reservations/placement/scope.py",
            "import django",
            "Pure domain modules",
            "reservations.placement.scope -> django",
        ),
        ("bmcsim/state.py", "from fleet import lifecycle", "bmcsim shares no code", "bmcsim.state -> fleet.lifecycle"),
        ("fleet/selectors.py", "import bmcsim.state", "never imports the simulator", "fleet.selectors -> bmcsim.state"),
        ("agent/metrics.py", "import core.topology", "program of its own", "agent.metrics -> core.topology"),
        (
            "tests/support/factories.py",
            "from bench import placement",
            "The tests never import the benchmarks",
            "tests.support.factories -> bench.placement",
        ),
    ],
)
def test_a_breach_breaks_its_contract(copy, module, line, broken, says):
    add_line(copy, module, line)
    result = lint_imports(copy)
    assert result.returncode == 1
    assert "Contracts: 7 kept, 1 broken." in result.stdout
    assert says in result.stdout
    assert broken in result.stdout.split("Broken contracts", 1)[1]
