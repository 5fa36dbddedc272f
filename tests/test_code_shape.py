"""The code stays readable in pieces: no function of the running system is over 60 lines
(migrations aside). A longer one is split into steps with names."""

import ast

from tests.support import REPO_ROOT

PACKAGES = ("gpufleet", "console", "workflows", "reservations", "remediation", "attestation", "fleet", "core")
PROGRAMS = ("agent", "bmcsim", "client/gpufleet_client")
MAX_LINES = 60


def test_no_function_is_over_60_lines():
    long = []
    for package in PACKAGES + PROGRAMS:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None  # ast.parse sets it on every node
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_LINES:
                        long.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
