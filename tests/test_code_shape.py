"""The code stays readable in pieces: no function of the running system is over 60 lines and no
module over 500 (migrations aside, and bmcsim's Redfish resources, which follow DMTF's schemas).
A longer function is split into steps with names, a longer module into modules by feature."""

import ast

from tests.support import REPO_ROOT

PACKAGES = ("gpufleet", "console", "workflows", "reservations", "remediation", "attestation", "fleet", "core")
PROGRAMS = ("agent", "bmcsim", "client/gpufleet_client")
MAX_LINES = 60
MAX_MODULE_LINES = 500


def production_modules():
    for package in PACKAGES + PROGRAMS:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def test_no_function_is_over_60_lines():
    long = []
    for path in production_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None  # ast.parse sets it on every node
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_module_is_over_500_lines():
    redfish_resources = REPO_ROOT / "bmcsim" / "redfish"
    sizes = {path: len(path.read_text().splitlines()) for path in production_modules()}
    long = [
        f"{path.relative_to(REPO_ROOT)} ({lines} lines)"
        for path, lines in sizes.items()
        if lines > MAX_MODULE_LINES and not path.is_relative_to(redfish_resources)
    ]
    assert long == []
