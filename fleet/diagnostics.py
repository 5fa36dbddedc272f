"""Diagnostics runs, pure: the levels the control plane asks a node's agent for, and which tests a
finished run failed.

The agent runs DCGM's levels (`dcgmi diag -r N` on a real server; simulated in bmcsim with their
durations): level 1 takes seconds, level 3 about fifteen minutes. Each result it gives is
{"test", "gpu", "passed", "detail"} (agent/app.py, GET /diagnostics).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SHORT = 1  # at every inspection
LONG = 3  # burn-in when a node comes back from quarantine or maintenance, and on idle nodes
LEVELS = (1, 2, 3, 4)


@dataclass(frozen=True)
class FailedTest:
    test: str
    gpu: int | None  # the agent's GPU index
    detail: str

    def __str__(self) -> str:
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        return f"{self.test}{where}: {self.detail or 'failed'}"


def failed_tests(results: object) -> list[FailedTest]:
    """The tests a finished run failed, in the agent's order. A result that is not a passing one
    as the agent's API describes it counts as failed: diagnostics fail closed."""
    if not isinstance(results, Iterable) or isinstance(results, str | bytes | dict):
        return [FailedTest("results", None, f"unreadable: {str(results)[:200]}")]
    failed = []
    for result in results:
        if not isinstance(result, dict):
            failed.append(FailedTest("results", None, f"unreadable: {str(result)[:200]}"))
        elif result.get("passed") is not True:
            test, detail = str(result.get("test", "unnamed")), str(result.get("detail", ""))
            failed.append(FailedTest(test, result.get("gpu"), detail))
    return failed


def verdict(failed: list[FailedTest]) -> str:
    """The quarantine reason for a run that failed `failed`: the first test and GPU, and how many more."""
    more = f" (and {len(failed) - 1} more failed)" if len(failed) > 1 else ""
    return f"{failed[0]}{more}"
