"""Diagnostics on a real server (agent/host/dcgm.py): DCGM's JSON read into the agent's results, and
`dcgmi diag` run, polled and cancelled, with the fake dcgmi of tests/agent/fake_dcgmi.py; last, the
real program (`gpu-agent --backend host`, on the stand-in GPU server of fake_gpu_server.py) told
where dcgmi is by its option and by its environment variable.

The HTTP API of the host backend's diagnostics is in test_host_backend.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from agent.backend import CANCELLED, FAILED, RUNNING, SUCCEEDED, Operation, Refused
from agent.host.dcgm import Diagnostics, Unreadable, results
from fleet.diagnostics import failed_tests, verdict
from tests.agent import fake_dcgmi
from tests.support.ports import free_port
from tests.support.processes import Process, answers, once_ready

H100_SERIAL, V100_SERIAL = "1652223012345", "0323617004711"  # tests/support/fake_nvml.py's
NVML_INDEX_OF_SERIAL = {H100_SERIAL: 0, V100_SERIAL: 1}
DEADLINE_S = 10.0
TOKEN = "node-token-for-the-test-0123456789"


def gpu_result(gpu: int, status: str, **more) -> dict:
    return {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": status, **more}


def warning(message: str) -> dict:
    return {"warning": message, "error_id": 28, "error_category": 4, "error_severity": 2}


# DCGM's JSON.


def test_dcgm_4_gives_one_result_per_test_and_gpu_with_dcgms_message_where_one_failed():
    output = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {
                            "name": "software",
                            "results": [gpu_result(0, "Pass"), gpu_result(1, "Pass")],
                            "test_summary": {"status": "Pass"},
                        }
                    ],
                },
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "results": [
                                gpu_result(0, "Pass", info=["Allocated 79 GB"]),
                                gpu_result(1, "Fail", warnings=[warning("GPU 1 had 3 uncorrectable memory errors")]),
                            ],
                            "test_summary": {"status": "Fail", "warnings": [warning("GPU 1 had 3 ...")]},
                        },
                        {
                            "name": "pulse_test",
                            "results": [
                                gpu_result(0, "Skip", info=["Pulse test is not supported on this GPU"]),
                                gpu_result(1, "Not Run"),
                            ],
                            "test_summary": {"status": "Skip"},
                        },
                    ],
                },
                {
                    "category": "Stress",
                    "tests": [
                        {
                            "name": "targeted_power",
                            "results": [gpu_result(0, "Warn", warnings=[warning("Power draw 380 W below 400 W")])],
                            "test_summary": {"status": "Warn"},
                        },
                        {"name": "memtest"},  # run on no GPU: no results, no summary
                    ],
                },
            ]
        },
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [{"entity_id": 0}]}],
        "metadata": {"version": "4.2.3"},
    }

    assert results(json.dumps(output)) == [
        {"test": "software", "gpu": 0, "passed": True, "detail": ""},
        {"test": "software", "gpu": 1, "passed": True, "detail": ""},
        {"test": "memory", "gpu": 0, "passed": True, "detail": ""},
        {"test": "memory", "gpu": 1, "passed": False, "detail": "GPU 1 had 3 uncorrectable memory errors"},
        {"test": "pulse_test", "gpu": 0, "passed": True, "detail": "skipped: Pulse test is not supported on this GPU"},
        {"test": "targeted_power", "gpu": 0, "passed": False, "detail": "Power draw 380 W below 400 W"},
    ]


def test_dcgm_4_a_failure_tied_to_no_gpu_is_the_tests_summary_and_other_entities_are_named():
    output = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "diagnostic",
                            "results": [gpu_result(0, "Pass")],
                            "test_summary": {"status": "Fail", "warnings": [warning("NVVS could not start")]},
                        },
                        {
                            "name": "cpu_eud",
                            "results": [
                                {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail"}
                            ],
                            "test_summary": {"status": "Fail"},
                        },
                        {"name": "eud", "results": [], "test_summary": {"status": "Pass"}},
                    ],
                }
            ]
        }
    }

    assert results(json.dumps(output)) == [
        {"test": "diagnostic", "gpu": 0, "passed": True, "detail": ""},
        {"test": "diagnostic", "gpu": None, "passed": False, "detail": "NVVS could not start"},
        {"test": "cpu_eud", "gpu": None, "passed": False, "detail": "CPU 0: DCGM's status: Fail"},
        {"test": "eud", "gpu": None, "passed": True, "detail": ""},
    ]


def test_gpus_are_given_the_agents_nvml_index_by_their_serial_number_where_dcgm_gives_it():
    """DCGM's GPU ids are NVML's indexes; should they ever differ, the serial numbers decide."""
    document = fake_dcgmi.document_4(
        {
            "gpus": [{"id": 0, "serial": V100_SERIAL}, {"id": 1, "serial": "unknown-to-the-agent"}],
            "outcomes": [{"test": "software", "gpu": 0, "status": "Fail", "message": "bad"}],
        },
        1,
    )
    assert [(r["gpu"], r["passed"]) for r in results(json.dumps(document), NVML_INDEX_OF_SERIAL)] == [
        (1, False),
        (1, True),
    ]
    old = fake_dcgmi.document_3({"gpus": [{"id": 0, "serial": V100_SERIAL}, {"id": 1, "serial": H100_SERIAL}]}, 2)
    assert {r["gpu"] for r in results(json.dumps(old), NVML_INDEX_OF_SERIAL) if r["test"] == "PCIe"} == {0, 1}
    assert [r["gpu"] for r in results(json.dumps(old), NVML_INDEX_OF_SERIAL) if r["test"] == "GPU Memory"] == [1, 0]


def test_dcgm_3_3_names_the_gpu_of_a_per_gpu_test_and_of_a_software_checks_error():
    output = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "Denylist", "results": [{"status": "Pass"}]},
                        {
                            "name": "Page Retirement/Row Remap",
                            "results": [
                                {
                                    "status": "Fail",
                                    "gpu_id": 1,
                                    "warnings": [{"warnings": "GPU 1 has uncorrectable row remap failures"}],
                                }
                            ],
                        },
                        {"name": "Persistence Mode", "results": [{"status": "Skip"}]},
                    ],
                },
                {
                    "category": "Integration",
                    "tests": [
                        {
                            "name": "PCIe",
                            "results": [
                                {"gpu_id": "0", "status": "Pass", "info": "GPU 0 bandwidth 24.5 GB/s"},
                                {"gpu_id": "1", "status": "Fail", "warnings": [warning("PCIe replay rate too high")]},
                            ],
                        }
                    ],
                },
            ]
        },
        "version": "3.3.9",
    }

    assert results(json.dumps(output)) == [
        {"test": "Denylist", "gpu": None, "passed": True, "detail": ""},
        {
            "test": "Page Retirement/Row Remap", "gpu": 1, "passed": False,
            "detail": "GPU 1 has uncorrectable row remap failures",
        },
        {"test": "Persistence Mode", "gpu": None, "passed": True, "detail": "skipped"},
        {"test": "PCIe", "gpu": 0, "passed": True, "detail": ""},
        {"test": "PCIe", "gpu": 1, "passed": False, "detail": "PCIe replay rate too high"},
    ]  # fmt: skip


def test_dcgm_3_2_names_the_gpu_in_gpu_ids_and_gives_one_message():
    output = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "GPU Memory",
                            "results": [
                                {"gpu_ids": "0", "status": "Pass"},
                                {
                                    "gpu_ids": "1",
                                    "status": "Fail",
                                    "warnings": "Memory error at 0x3c000",
                                    "error_id": 9,
                                },
                            ],
                        }
                    ],
                }
            ]
        }
    }

    assert results(json.dumps(output))[1] == {
        "test": "GPU Memory", "gpu": 1, "passed": False, "detail": "Memory error at 0x3c000"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("", "dcgmi wrote no JSON"),
        ("Error: unable to establish a connection to the specified host: localhost", "dcgmi wrote no JSON"),
        ('{"DCGM Diagnostic": {"test_categories": [', "does not parse"),
        ("[1, 2]", "no JSON"),
        ('{"something": "else"}', "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "no test results"),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"results": []}]}]}}',
            "without a name",
        ),
        ('{"DCGM Diagnostic": {"test_categories": {"category": "Hardware"}}}', "no test_categories"),
        ('{"DCGM Diagnostic": {"test_categories": ["Hardware"]}}', "where an object should be"),
    ],
)  # fmt: skip
def test_output_that_is_not_dcgms_json_with_results_is_unreadable(output, says):
    with pytest.raises(Unreadable, match=says) as raised:
        results(output)
    assert not raised.value.reported


def test_dcgms_runtime_error_is_what_it_says():
    output = json.dumps({"DCGM Diagnostic": {"runtime_error": "Error: the diagnostic is already running\n"}})
    with pytest.raises(Unreadable) as raised:
        results(output)
    assert raised.value.reported and str(raised.value) == "Error: the diagnostic is already running"


def test_text_around_the_json_is_let_be_and_an_unknown_status_fails():
    test = {"name": "t", "results": [gpu_result(0, "Maybe")]}
    document = {"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [test]}]}}
    output = "Warning: the diagnostic took longer than expected\n" + json.dumps(document) + "\n"
    assert results(output) == [
        {"test": "t", "gpu": 0, "passed": False, "detail": "DCGM's status 'Maybe', unknown to gpu-agent"}
    ]


# Running dcgmi.


@pytest.fixture
def dcgmi(tmp_path) -> Callable[..., Path]:
    """Writes the fake dcgmi with these settings (tests/agent/fake_dcgmi.py), its calls and its pid
    in the test's folder; returns its path."""

    def install(**settings) -> Path:
        settings = {"calls": str(tmp_path / "dcgmi-calls"), "pid": str(tmp_path / "dcgmi-pid"), **settings}
        return fake_dcgmi.install(tmp_path / "dcgm", **settings)

    return install


@pytest.fixture
def runs() -> Iterator[Callable[..., Diagnostics]]:
    """Diagnostics like the host backend's; any run still running at the end is cancelled."""
    made: list[Diagnostics] = []

    def make(program: Path | str, **kwargs) -> Diagnostics:
        made.append(Diagnostics(str(program), nvml_index_of_serial=NVML_INDEX_OF_SERIAL, **kwargs))
        return made[-1]

    yield make
    for diagnostics in made:
        diagnostics.cancel()


def finished(diagnostics: Diagnostics) -> Operation:
    deadline = time.monotonic() + DEADLINE_S
    while (operation := diagnostics.operation).state == RUNNING:
        assert time.monotonic() < deadline, f"still running after {DEADLINE_S} s"
        time.sleep(0.02)
    return operation


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("dcgm_format", ["4", "3"])
def test_a_run_is_dcgmi_diag_at_the_level_asked_and_succeeds_with_its_results(dcgmi, runs, tmp_path, dcgm_format):
    diagnostics = runs(dcgmi(format=dcgm_format, seconds=0.3))

    started = diagnostics.start(2)

    assert started.state == RUNNING and started.level == 2 and started.results == ()
    assert started.started_at == pytest.approx(time.time(), abs=5) and started.finished_at is None
    assert diagnostics.operation == started
    done = finished(diagnostics)
    assert done.state == SUCCEEDED and done.level == 2 and done.started_at == started.started_at
    assert done.finished_at is not None and done.started_at is not None
    assert done.finished_at - done.started_at >= 0.3
    assert all(r["passed"] for r in done.results) and done.detail == ""
    tests = {r["test"] for r in done.results}
    if dcgm_format == "4":
        assert tests == {"software", "pcie", "memory"}
        assert sorted((r["test"], r["gpu"]) for r in done.results if r["test"] != "software") == [
            ("memory", 0), ("memory", 1), ("pcie", 0), ("pcie", 1),
        ]  # fmt: skip
    else:
        assert {"Denylist", "Inforom", "PCIe", "GPU Memory"} <= tests
    assert (tmp_path / "dcgmi-calls").read_text() == "diag -r 2 -j\n"


@pytest.mark.parametrize(("dcgm_format", "test"), [("4", "targeted_stress"), ("3", "Targeted Stress")])
def test_a_failed_test_is_a_result_naming_the_test_and_gpu_of_a_run_that_succeeded(dcgmi, runs, dcgm_format, test):
    """dcgmi exits 226 (DCGM_ST_NVVS_ERROR) then: the run itself went well, and the control plane
    quarantines the node with the test and the GPU as its reason."""
    message = "Detected 12 ECC double-bit errors on GPU 1"
    outcomes = [{"test": test, "gpu": 1, "status": "Fail", "message": message}]
    diagnostics = runs(dcgmi(format=dcgm_format, outcomes=outcomes))

    diagnostics.start(3)

    done = finished(diagnostics)
    assert done.state == SUCCEEDED
    failed = [r for r in done.results if not r["passed"]]
    assert failed == [{"test": test, "gpu": 1, "passed": False, "detail": message}]
    assert verdict(failed_tests(list(done.results))) == f"{test} on GPU 1: {message}"


def test_a_cancel_ends_the_run_at_once_and_stops_dcgmi(dcgmi, runs, tmp_path):
    diagnostics = runs(dcgmi(seconds=60))
    started = diagnostics.start(3)
    until(lambda: (tmp_path / "dcgmi-pid").exists(), "dcgmi started")
    pid = int((tmp_path / "dcgmi-pid").read_text())

    cancelled = diagnostics.cancel()

    assert cancelled.state == CANCELLED and cancelled.started_at == started.started_at and cancelled.level == 3
    assert cancelled.finished_at is not None and cancelled.results == ()
    until(lambda: gone(pid), "dcgmi gone after SIGTERM")
    time.sleep(0.2)
    assert diagnostics.operation == cancelled  # its exit does not make the run failed
    assert diagnostics.cancel() == cancelled  # a run not running is given as it stands
    dcgmi(seconds=0)
    again = diagnostics.start(1)  # dcgmi has exited: a new run may start
    assert again.state == RUNNING and finished(diagnostics).state == SUCCEEDED


@pytest.mark.timing
def test_a_dcgmi_that_ignores_sigterm_is_killed_after_the_grace_and_no_run_starts_meanwhile(dcgmi, runs, tmp_path):
    diagnostics = runs(dcgmi(seconds=60, ignore_sigterm=True), cancel_grace_s=1.0)
    diagnostics.start(4)
    until(lambda: (tmp_path / "dcgmi-pid").exists(), "dcgmi started")
    pid = int((tmp_path / "dcgmi-pid").read_text())

    assert diagnostics.cancel().state == CANCELLED
    with pytest.raises(Refused, match="still stopping") as refused:
        diagnostics.start(1)

    assert refused.value.status == 409
    assert not gone(pid)
    until(lambda: gone(pid), "dcgmi killed")
    until(lambda: starts(diagnostics), "a new run")


def starts(diagnostics: Diagnostics) -> bool:
    try:
        return diagnostics.start(1).state == RUNNING
    except Refused:
        return False


def test_only_one_run_at_a_time(dcgmi, runs):
    diagnostics = runs(dcgmi(seconds=60))
    diagnostics.start(1)
    with pytest.raises(Refused, match="a diagnostics run is already running") as refused:
        diagnostics.start(1)
    assert refused.value.status == 409


def test_output_that_is_not_json_is_a_failed_run_saying_what_dcgmi_said(dcgmi, runs):
    diagnostics = runs(dcgmi(garbage="Segmentation fault (core dumped)\x00\xff", exit=139))

    diagnostics.start(1)

    done = finished(diagnostics)
    assert done.state == FAILED and done.results == ()
    assert done.detail.startswith("dcgmi diag exited with 139, without results (dcgmi wrote no JSON): ")
    assert done.detail.endswith("Error: unable to establish a connection to the host engine")  # its stderr


def test_dcgms_runtime_error_is_a_failed_run_saying_it(dcgmi, runs):
    diagnostics = runs(dcgmi(runtime_error="Error: Unable to connect to the host engine: is nv-hostengine running?"))

    diagnostics.start(1)

    done = finished(diagnostics)
    assert (done.state, done.results) == (FAILED, ())
    assert done.detail == (
        "dcgmi diag exited with 235, without results:"
        " Error: Unable to connect to the host engine: is nv-hostengine running?"
    )


def test_a_dcgmi_killed_by_someone_else_is_a_failed_run(dcgmi, runs, tmp_path):
    diagnostics = runs(dcgmi(seconds=60))
    diagnostics.start(2)
    until(lambda: (tmp_path / "dcgmi-pid").exists(), "dcgmi started")

    os.kill(int((tmp_path / "dcgmi-pid").read_text()), signal.SIGKILL)

    done = finished(diagnostics)
    assert (done.state, done.detail, done.results) == (FAILED, "dcgmi was killed by SIGKILL", ())


def test_without_dcgmi_there_are_no_diagnostics_and_a_bad_level_is_refused_first(dcgmi, runs, tmp_path):
    for program in ("dcgmi-that-is-not-installed", tmp_path / "nowhere" / "dcgmi"):
        with pytest.raises(Refused, match=r"^DCGM is not installed: no diagnostics \(") as refused:
            runs(program).start(1)
        assert refused.value.status == 501 and str(program) in str(refused.value)
    for level in (0, 5):
        with pytest.raises(Refused, match="'level' must be 1, 2, 3 or 4") as refused:
            runs(dcgmi()).start(level)
        assert refused.value.status == 400
    assert runs("dcgmi-that-is-not-installed").operation == Operation()


# The real program.


@pytest.mark.parametrize("told_by", ["option", "environment"])
def test_the_agent_program_runs_the_dcgmi_its_option_or_environment_names(tmp_path, dcgmi, told_by):
    outcomes = [{"test": "memory", "gpu": 0, "status": "Fail", "message": "GPU 0 memory test failed at 0x3c000"}]
    program = dcgmi(outcomes=outcomes, seconds=0.2)
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "kmsg").touch()
    port = free_port()
    option, env = (["--dcgmi", str(program)], {}) if told_by == "option" else ([], {"GPU_AGENT_DCGMI": str(program)})
    process = Process(
        "gpu-agent-dcgmi",
        [
            sys.executable, "-m", "tests.agent.fake_gpu_server", str(tmp_path / "nvml-calls"),
            "--listen", f"127.0.0.1:{port}", "--token-file", str(tmp_path / "token"),
            "--kmsg", str(tmp_path / "kmsg"), "--tcti", "swtpm:host=127.0.0.1,port=1",
            "--ak-cert", str(tmp_path / "ak.pem"), "--event-log", str(tmp_path / "event-log"), *option,
        ],
        {"PATH": "/usr/bin:/bin", **env},
        tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/diagnostics"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        once_ready(process, "the agent", lambda: answers(url), timeout=20)
        started = requests.post(url, json={"level": 2}, headers=bearer, timeout=10)
        assert started.status_code == 202 and started.json()["state"] == "running", started.text
        until(lambda: requests.get(url, headers=bearer, timeout=10).json()["state"] != "running", "the run's end")
        answer = requests.get(url, headers=bearer, timeout=10).json()
    finally:
        process.stop()
    assert answer["state"] == "succeeded" and answer["level"] == 2
    assert answer["started_at"] == started.json()["started_at"] < answer["finished_at"]
    assert [r for r in answer["results"] if not r["passed"]] == [
        {"test": "memory", "gpu": 0, "passed": False, "detail": "GPU 0 memory test failed at 0x3c000"}
    ]
    assert len(answer["results"]) == 6  # software, pcie and memory on the H100 and the V100
    assert (tmp_path / "dcgmi-calls").read_text() == "diag -r 2 -j\n"
