"""A stand-in for DCGM's `dcgmi diag -r LEVEL -j`, for the agent's host backend on a machine without
DCGM: it takes the run's time, then prints the JSON of DCGM 4.x or 3.3 (their shapes, described
in agent/host/dcgm.py, with made-up values) and exits as dcgmi does: 0 if every test passed,
226 (DCGM_ST_NVVS_ERROR, -30) if one failed or warned.

install() writes a `dcgmi` into a folder, which runs this file with the settings given to it:

    format          "4" (DCGM 4.x) or "3" (DCGM 3.3)
    gpus            [{"id": DCGM's GPU id, "serial": ...}], by default the fake NVML's H100 and V100
    seconds         how long the run takes
    outcomes        [{"test", "gpu" (DCGM's id; None: the test's summary in 4.x, or a 3.3 Deployment
                    test), "status": "Fail" | "Warn" | "Skip", "message"}]; other results pass
    garbage         print this (not JSON) and exit with `exit`
    runtime_error   print DCGM's JSON of a run that could not start, saying this, and exit with `exit`
    exit            the exit status of `garbage` and `runtime_error` (default 235, -21: no connection)
    ignore_sigterm  go on running on SIGTERM (dcgmi exits with 143)
    calls, pid      files the program appends its arguments to, and writes its process id to
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import sys
import time
from pathlib import Path

NVVS_ERROR = 256 - 30
NO_CONNECTION = 256 - 21
LEVELS = ("1", "2", "3", "4")
# The tests each level adds to the one below, by their DCGM 4.x names (nvvs/include/PluginStrings.h),
# with their category and their DCGM 3.3 names (dcgmi/Diag.cpp's DISPLAY_*).
LEVEL_TESTS: dict[int, list[tuple[str, str, str | None]]] = {
    1: [("software", "Deployment", None)],
    2: [("pcie", "Integration", "PCIe"), ("memory", "Hardware", "GPU Memory")],
    3: [
        ("targeted_stress", "Stress", "Targeted Stress"),
        ("targeted_power", "Stress", "Targeted Power"),
        ("diagnostic", "Hardware", "Diagnostic"),
    ],
    4: [
        ("memory_bandwidth", "Stress", "Memory Bandwidth"),
        ("memtest", "Stress", "Memtest"),
        ("pulse_test", "Hardware", "Pulse Test"),
    ],
}
# DCGM 3.3's software checks, one result each for the whole node (its "Deployment" category).
DEPLOYMENT_TESTS = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
CATEGORIES = ("Deployment", "Integration", "Hardware", "Stress")
DEFAULT_GPUS = [{"id": 0, "serial": "1652223012345"}, {"id": 1, "serial": "0323617004711"}]  # fake_nvml's


def install(directory: Path, **settings) -> Path:
    """Writes `directory`/dcgmi, which runs this fake with `settings` (see the module's doc)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "fake-dcgmi.json"
    config.write_text(json.dumps(settings))
    program = directory / "dcgmi"
    command = shlex.join([sys.executable, str(Path(__file__).resolve()), str(config)])
    program.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def _outcome(settings: dict, test: str, gpu: int | None) -> dict | None:
    return next((o for o in settings.get("outcomes", []) if o["test"] == test and o.get("gpu") == gpu), None)


def _warning(message: str, key: str = "warning") -> dict:
    return {key: message, "error_id": 99, "error_category": 4, "error_severity": 2}


def document_4(settings: dict, level: int) -> dict:
    gpus = settings.get("gpus", DEFAULT_GPUS)
    categories: dict[str, list] = {}
    for tier in range(1, level + 1):
        for name, category, _ in LEVEL_TESTS[tier]:
            results, failing = [], []
            for gpu in gpus:
                result: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu["id"], "status": "Pass"}
                if outcome := _outcome(settings, name, gpu["id"]):
                    result["status"] = outcome["status"]
                    result["warnings"] = [_warning(outcome["message"])]
                    if outcome["status"] != "Skip":
                        failing.append(outcome)
                results.append(result)
            summary: dict = {"status": "Fail" if failing else "Pass"}
            if failing:
                summary["warnings"] = [_warning(o["message"]) for o in failing]
            if outcome := _outcome(settings, name, None):
                summary = {"status": outcome["status"], "warnings": [_warning(outcome["message"])]}
            categories.setdefault(category, []).append({"name": name, "results": results, "test_summary": summary})
    return {
        "DCGM Diagnostic": {
            "test_categories": [{"category": c, "tests": categories[c]} for c in CATEGORIES if c in categories]
        },
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [{"entity_id": g["id"], "serial_num": g["serial"], "device_id": "2330"} for g in gpus],
            }
        ],
        "metadata": {"version": "4.2.3", "Driver Version Detected": "570.158.01"},
    }


def document_3(settings: dict, level: int) -> dict:
    gpus = settings.get("gpus", DEFAULT_GPUS)
    deployment = []
    for name in DEPLOYMENT_TESTS:
        result: dict = {"status": "Pass"}
        if outcome := _outcome(settings, name, None):
            # As DCGM 3.3 writes a software check's error: its GPU as a number, its message under "warnings".
            result = {"status": outcome["status"], "warnings": [_warning(outcome["message"], "warnings")]}
            if "error_gpu" in outcome:
                result["gpu_id"] = outcome["error_gpu"]
        deployment.append({"name": name, "results": [result]})
    categories: dict[str, list] = {"Deployment": deployment}
    for tier in range(2, level + 1):
        for _, category, title in LEVEL_TESTS[tier]:
            assert title is not None  # only level 1's test has no DCGM 3.3 name of its own
            results = []
            for gpu in gpus:
                result = {"gpu_id": str(gpu["id"]), "status": "Pass"}
                if outcome := _outcome(settings, title, gpu["id"]):
                    result["status"] = outcome["status"]
                    result["warnings"] = [_warning(outcome["message"])]
                results.append(result)
            categories.setdefault(category, []).append({"name": title, "results": results})
    return {
        "DCGM GPU Diagnostic": {
            "test_categories": [{"category": c, "tests": categories[c]} for c in CATEGORIES if c in categories]
        },
        "version": "3.3.9",
        "Driver Version Detected": "570.158.01",
        "GPU Device IDs": ["2330" for _ in gpus],
        "GPU Device Serials": {str(g["id"]): g["serial"] for g in gpus},
    }


def main(config: str, arguments: list[str]) -> int:
    settings = json.loads(Path(config).read_text())
    # dcgmi has nv-hostengine stop the run on SIGTERM, then exits with 128 + 15.
    signal.signal(signal.SIGTERM, signal.SIG_IGN if settings.get("ignore_sigterm") else lambda *_: os._exit(143))
    if settings.get("calls"):
        with open(settings["calls"], "a") as calls:
            calls.write(shlex.join(arguments) + "\n")
    if settings.get("pid"):  # whole or not at all, for a test that waits for it
        written = Path(settings["pid"] + ".new")
        written.write_text(str(os.getpid()))
        written.rename(settings["pid"])
    if len(arguments) != 4 or arguments[:2] != ["diag", "-r"] or arguments[3] != "-j" or arguments[2] not in LEVELS:
        print(f"fake dcgmi: not what the agent runs: {shlex.join(arguments)}", file=sys.stderr)
        return 255
    time.sleep(settings.get("seconds", 0.0))
    if "garbage" in settings:
        print(settings["garbage"])
        print("Error: unable to establish a connection to the host engine", file=sys.stderr)
        return settings.get("exit", NO_CONNECTION)
    if "runtime_error" in settings:
        print(json.dumps({"DCGM Diagnostic": {"runtime_error": settings["runtime_error"], "version": "4.2.3"}}))
        return settings.get("exit", NO_CONNECTION)
    level = int(arguments[2])
    document = (document_3 if settings.get("format") == "3" else document_4)(settings, level)
    print(json.dumps(document, indent=3))
    failed = any(o["status"] in ("Fail", "Warn") for o in settings.get("outcomes", []))
    return NVVS_ERROR if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
