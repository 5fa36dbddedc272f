"""The host backend whole, as `gpu-agent --backend host` serves it: HostBackend.open with its real
parts, behind the agent's HTTP layer (agent.app.make_app on a real aiohttp runner, called over
HTTP with the node's token).

What a GPU server has is stood in for: libnvidia-ml by the fake of tests/support/fake_nvml.py
(an H100 and a V100), nvidia-smi by a fake script on the PATH, /dev/kmsg by a file of kmsg records
the test appends to and the agent follows as `tail -f` would, and the TPM by swtpm with a
measured boot (tests/support/measured_boot.py) and an AK certified by a test manufacturer CA
(tests/support/ak_certificates.py), DCGM's dcgmi by tests/agent/fake_dcgmi.py. Disks and MAC
addresses are this machine's own.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest
import requests
from aiohttp import web
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from agent.app import Served, make_app
from agent.host import HostBackend
from agent.host.kernel_log import KmsgFollower
from agent.host.tpm import create_attestation_key
from attestation.policy import load_policy_file
from attestation.reference import parse_manifest, reference_values
from attestation.verifier import new_nonce, verify
from tests.agent import fake_dcgmi
from tests.support import fake_nvml
from tests.support.ak_certificates import NODE, ak_certificate
from tests.support.fake_nvml import fake_nvidia_smi, h100, v100
from tests.support.measured_boot import KNOWN_GOOD_BOOT, boot, known_good_manifest

library = fake_nvml.library  # the fixture, by assignment: an imported name that arguments shadow is a lint error

TOKEN = "node-token-for-the-test-0123456789"
AK_HANDLE = 0x81010002
DRIVER_VERSION = "570.158.01"  # what the fake library reports
# The GPUs' PCI addresses as the kernel log writes them: no function, lower-case hex.
H100_IN_KMSG, V100_IN_KMSG = "0000:18:00", "0000:3b:00"
# The tests that ask for no evidence give a TPM nothing listens on: opening the backend does not touch it.
NO_TPM = {"tcti": "swtpm:host=127.0.0.1,port=1", "ak": f"{AK_HANDLE:#x}"}
ALL_DONE = 'echo "All GPUs were successfully reset."'
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
XID_LABELS = {"err_code", "err_msg"}  # DCGM_FI_DEV_XID_ERRORS's own
DEADLINE_S = 5.0  # the kernel-log follower rests a second at the end of the file between reads


class KernelLog:
    """A file of /dev/kmsg records, appended to as the kernel would log them."""

    def __init__(self, path: Path):
        self.path = path
        self.path.touch()
        self._sequence = 1000

    def xid(self, pci: str, xid: int, detail: str) -> str:
        """A new record (the next sequence number) of the NVRM XID line NVIDIA's driver logs."""
        self._sequence += 1
        # Priority 3 with facility 0: the kernel's own kern.err, where NVRM logs an XID.
        return f"3,{self._sequence},{self._sequence * 1000},-;NVRM: Xid (PCI:{pci}): {xid}, {detail}"

    def append(self, *records: str) -> None:
        with self.path.open("a") as log:
            log.writelines(record + "\n" for record in records)


def fell_off_the_bus(log: KernelLog, pci: str = H100_IN_KMSG) -> str:
    return log.xid(pci, 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")


class Agent:
    """A HostBackend served by the agent's app on a real aiohttp runner, its event loop in a thread."""

    def __init__(self, backend: HostBackend):
        self.backend = backend
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-http", daemon=True)
        self._thread.start()
        # blocking=True, as the CLI serves the host backend: its calls run off the event loop.
        self._runner = web.AppRunner(make_app(Served(backend, TOKEN, blocking=True)), access_log=None)
        self._await(self._runner.setup())
        self._await(web.TCPSite(self._runner, "127.0.0.1", 0).start())
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._http = requests.Session()
        self._http.headers["Authorization"] = f"Bearer {TOKEN}"

    def _await(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def stop(self) -> None:
        self._http.close()
        self._await(self._runner.cleanup())
        self._await(self._loop.shutdown_default_executor())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def get(self, path: str) -> requests.Response:
        return self._http.get(self.url + path, timeout=30)

    def post(self, path: str, body: dict | None = None) -> requests.Response:
        return self._http.post(self.url + path, json=body, timeout=30)

    def delete(self, path: str) -> requests.Response:
        return self._http.delete(self.url + path, timeout=30)

    def samples(self) -> list:
        answer = self.get("/metrics")
        assert answer.status_code == 200, answer.text
        return [s for family in text_string_to_metric_families(answer.text) for s in family.samples]

    def value(self, name: str, default: float | None = None, **labels: str) -> float | None:
        """The one sample of `name` with these labels; `default` if there is none."""
        names = (name, f"{name}_total")  # prometheus_client's parser adds _total to every counter's samples
        found = [s.value for s in self.samples() if s.name in names and labels.items() <= s.labels.items()]
        assert len(found) <= 1, f"{len(found)} samples of {name} {labels}"
        return found[0] if found else default

    def healthy(self, gpu: int) -> bool:
        return self.value("gpu_agent_gpu_healthy", gpu=str(gpu)) == 1

    def xids(self, gpu: int, xid: int) -> float:
        count = self.value("gpu_agent_xid_errors_total", 0.0, gpu=str(gpu), xid=str(xid))
        assert count is not None  # the default stands in for a missing sample
        return count

    def finished(self, operation: str) -> dict:
        """GET /<operation> until it no longer runs."""
        deadline = time.monotonic() + DEADLINE_S
        while (state := self.get(f"/{operation}").json())["state"] == "running":
            assert time.monotonic() < deadline, f"{operation} still running after {DEADLINE_S} s"
            time.sleep(0.02)
        return state


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.05)


@pytest.fixture
def kernel_log(tmp_path) -> KernelLog:
    return KernelLog(tmp_path / "kmsg")


@pytest.fixture
def followers(monkeypatch) -> Iterator[list[KmsgFollower]]:
    """The kernel-log followers HostBackend.open starts; it keeps no handle on its follower, so the
    test records them, to stop their threads at teardown."""
    started: list[KmsgFollower] = []

    class RecordedFollower(KmsgFollower):
        def start(self) -> None:
            super().start()
            started.append(self)

    monkeypatch.setattr("agent.host.KmsgFollower", RecordedFollower)
    yield started
    for follower in started:
        follower.stop()


@pytest.fixture
def start_agent(library, followers, tmp_path) -> Iterator[Callable[..., Agent]]:
    """Opens the host backend as the CLI does, on a node with an H100 and a V100, and serves it."""
    library.gpus = [h100(), v100()]
    agents: list[Agent] = []

    def start(
        kmsg: Path,
        *,
        tcti: str,
        ak: str,
        ak_cert: Path | None = None,
        event_log: Path | None = None,
        dcgmi: str = "dcgmi",
    ) -> Agent:
        backend = HostBackend.open(
            tcti=tcti,
            ak=ak,
            ak_cert=str(ak_cert or tmp_path / "ak.crt"),
            event_log=str(event_log or tmp_path / "binary_bios_measurements"),
            kmsg=str(kmsg),
            dcgmi=dcgmi,
        )
        agents.append(Agent(backend))
        return agents[-1]

    yield start
    for agent in agents:
        agent.backend.cancel_diagnostics()  # a fake dcgmi still running
        agent.stop()
        agent.backend.nvml.close()  # stops NVML's XID event thread, before the fake library goes


@pytest.fixture
def nvidia_smi(library, tmp_path, monkeypatch) -> Callable[[str], None]:
    """Puts a fake nvidia-smi first on the PATH, where the agent finds it; the returned function
    sets what its --gpu-reset does."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")

    def reset_does(script: str) -> None:
        fake_nvidia_smi(directory, library.calls, script)

    reset_does(ALL_DONE)
    return reset_does


# XIDs and health.


def test_metrics_show_every_gpu_and_a_logged_xid_counts_once_and_marks_its_gpu_unhealthy(
    start_agent, kernel_log, library, followers
):
    agent = start_agent(kernel_log.path, **NO_TPM)

    temperatures = [s for s in agent.samples() if s.name == "DCGM_FI_DEV_GPU_TEMP"]
    assert [s.labels for s in temperatures] == [
        {
            "gpu": str(index),
            "UUID": gpu.uuid,
            "pci_bus_id": gpu.bus_id,
            "device": f"nvidia{index}",
            "modelName": gpu.name,
            "Hostname": socket.gethostname(),
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
        }
        for index, gpu in enumerate((h100(), v100()))
    ]
    assert [s.value for s in temperatures] == [41.0, 38.0]
    dcgm = [s for s in agent.samples() if s.name.startswith("DCGM_FI_")]
    assert all(set(s.labels) == (DCGM_LABELS | XID_LABELS if "XID" in s.name else DCGM_LABELS) for s in dcgm)
    assert {(s.labels["gpu"], s.labels["UUID"], s.labels["pci_bus_id"]) for s in dcgm} == {
        ("0", h100().uuid, "00000000:18:00.0"),
        ("1", v100().uuid, "00000000:3B:00.0"),
    }
    assert agent.healthy(0) and agent.healthy(1)
    assert agent.value("gpu_agent_xid_errors_total") is None

    record = fell_off_the_bus(kernel_log)
    kernel_log.append(record)
    until(lambda: agent.xids(0, 79) == 1, "the XID counted")
    assert not agent.healthy(0)
    assert agent.healthy(1)
    assert agent.value("DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79

    # The same kmsg record again (its sequence number already seen), then a later one to know both were read.
    kernel_log.append(record, kernel_log.xid(V100_IN_KMSG, 13, "Graphics SM Warp Exception on (GPC 0, TPC 1)"))
    until(lambda: agent.xids(1, 13) == 1, "the later record counted")
    assert agent.xids(0, 79) == 1
    # The kernel log is the only source: no NVML event set was created, which would count each XID twice.
    assert [f.path for f in followers] == [str(kernel_log.path)]
    assert library.registered == []
    assert "nvmlEventSetCreate" not in library.logged()


def test_a_reset_makes_the_gpu_healthy_again_and_its_xids_keep_their_count(
    start_agent, kernel_log, library, nvidia_smi
):
    nvidia_smi('echo "GPU 00000000:18:00.0 was successfully reset."')
    agent = start_agent(kernel_log.path, **NO_TPM)
    kernel_log.append(fell_off_the_bus(kernel_log))
    until(lambda: not agent.healthy(0), "the GPU unhealthy")

    started = agent.post("/gpu-reset", {"gpu": 0})

    assert started.status_code == 202, started.text
    assert started.json()["gpu"] == 0
    done = agent.finished("gpu-reset")
    assert done | {"started_at": 0, "finished_at": 0} == {
        "state": "succeeded",
        "gpu": 0,
        "detail": "GPU 00000000:18:00.0 was successfully reset.",
        "started_at": 0,
        "finished_at": 0,
    }
    assert done["started_at"] <= done["finished_at"]
    # NVML let go of the GPU and persistence mode was off for the reset, then both came back.
    assert library.logged() == [
        "nvmlInit",
        "nvmlShutdown",
        "nvidia-smi -i 0 -pm 0",
        "nvidia-smi --gpu-reset -i 0",
        "nvidia-smi -i 0 -pm 1",
        "nvmlInit",
    ]
    assert agent.healthy(0)
    assert agent.xids(0, 79) == 1
    assert agent.value("DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79  # dcgm-exporter's gauge keeps the last XID

    # Only the XIDs up to the reset are forgiven.
    kernel_log.append(fell_off_the_bus(kernel_log))
    until(lambda: agent.xids(0, 79) == 2, "the XID after the reset counted")
    assert not agent.healthy(0)


def test_a_failed_reset_says_what_nvidia_smi_said_and_the_gpu_stays_unhealthy(
    start_agent, kernel_log, library, nvidia_smi
):
    # What nvidia-smi said to NVIDIA's NVSentinel (github.com/NVIDIA/NVSentinel/issues/1690).
    nvidia_smi(
        'echo "The following GPUs could not be reset:"; '
        'echo "  GPU 00000000:18:00.0: In use by another client"; exit 255'
    )
    agent = start_agent(kernel_log.path, **NO_TPM)
    kernel_log.append(fell_off_the_bus(kernel_log))
    until(lambda: not agent.healthy(0), "the GPU unhealthy")

    assert agent.post("/gpu-reset", {"gpu": 0}).status_code == 202
    done = agent.finished("gpu-reset")

    assert (done["state"], done["gpu"]) == ("failed", 0)
    assert done["detail"] == (
        "nvidia-smi --gpu-reset -i 0 exited with 255: The following GPUs could not be reset:\n"
        "  GPU 00000000:18:00.0: In use by another client"
    )
    assert library.logged()[-2:] == ["nvidia-smi -i 0 -pm 1", "nvmlInit"]
    assert not agent.healthy(0)
    assert agent.healthy(1)
    assert agent.xids(0, 79) == 1


def test_a_gpu_lost_from_the_bus_shows_unhealthy_beside_the_others_and_its_reset_ends_failed(
    start_agent, kernel_log, library, nvidia_smi
):
    """XID 79's GPU stops answering NVML: /metrics must still show the node, and a reset of it
    must end (it used to leave /metrics a 500 and the reset running for ever)."""
    nvidia_smi('echo "GPU 00000000:18:00.0 was successfully reset."')
    agent = start_agent(kernel_log.path, **NO_TPM)
    library.gpus[0].lost = True

    assert not agent.healthy(0) and agent.healthy(1)
    assert agent.value("DCGM_FI_DEV_GPU_TEMP", gpu="0") is None and agent.value("DCGM_FI_DEV_GPU_TEMP", gpu="1")

    assert agent.post("/gpu-reset", {"gpu": 0}).status_code == 202
    done = agent.finished("gpu-reset")
    assert done["state"] == "failed" and "NVMLError" in done["detail"]
    assert agent.post("/gpu-reset", {"gpu": 0}).status_code == 202  # a failed reset may be tried again


def test_a_reset_and_the_wipe_wait_for_each_other(start_agent, kernel_log, library, nvidia_smi):
    nvidia_smi("sleep 1; echo reset")
    agent = start_agent(kernel_log.path, **NO_TPM)
    assert agent.post("/gpu-wipe").status_code == 202
    refused = agent.post("/gpu-reset", {"gpu": 1})
    assert refused.status_code == 409 and refused.json()["detail"] == "a GPU memory wipe is running"
    assert agent.finished("gpu-wipe")["state"] == "succeeded"
    assert agent.post("/gpu-reset", {"gpu": 1}).status_code == 202
    assert agent.post("/gpu-wipe").json()["detail"] == "a GPU reset is running"


def test_the_gpu_wipe_is_refused_while_a_gpu_has_ecc_off_and_resets_every_gpu_otherwise(
    start_agent, kernel_log, library, nvidia_smi
):
    agent = start_agent(kernel_log.path, **NO_TPM)
    library.gpus[1].ecc_mode = [pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_DISABLED]

    refused = agent.post("/gpu-wipe")

    assert refused.status_code == 409
    assert refused.json() == {"detail": "ECC is off on GPU 1: a reset would not clear its memory"}
    assert agent.get("/gpu-wipe").json()["state"] == "idle"
    assert not any(call.startswith("nvidia-smi") for call in library.logged())

    library.gpus[1].ecc_mode = [pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED]
    started = agent.post("/gpu-wipe")

    assert started.status_code == 202, started.text
    done = agent.finished("gpu-wipe")
    assert (done["state"], done["detail"]) == ("succeeded", "All GPUs were successfully reset.")
    assert [call for call in library.logged() if call.startswith("nvidia-smi")] == [
        "nvidia-smi -i 0 -pm 0",
        "nvidia-smi --gpu-reset",  # every GPU in one go
        "nvidia-smi -i 0 -pm 1",
    ]


def test_without_a_readable_kernel_log_xids_come_from_nvml_events_alone(start_agent, tmp_path, library, followers):
    agent = start_agent(tmp_path / "no-kmsg-here", **NO_TPM)

    # No kernel-log follower runs, so NVML's events are the one source.
    assert followers == []
    assert library.registered == [(0, pynvml.nvmlEventTypeXidCriticalError), (1, pynvml.nvmlEventTypeXidCriticalError)]
    library.events.put((1, 79))
    until(lambda: agent.xids(1, 79) == 1, "the NVML event counted")
    assert not agent.healthy(1)
    assert agent.healthy(0)
    assert agent.value("DCGM_FI_DEV_XID_ERRORS", gpu="1") == 79


# Evidence, inventory, diagnostics.


def test_the_evidence_of_a_known_good_boot_is_affirmed_by_the_control_planes_verifier(
    start_agent, kernel_log, tpm, tmp_path, manufacturer_ca, roots
):
    # The node as installed (its AK created by the agent, certified by the manufacturer CA), then booted.
    ak_cert = tmp_path / "ak.crt"
    ak_cert.write_text(ak_certificate(create_attestation_key(tcti=tpm.tcti, handle=AK_HANDLE), manufacturer_ca))
    event_log = tmp_path / "binary_bios_measurements"
    boot(tpm, event_log, KNOWN_GOOD_BOOT)
    agent = start_agent(kernel_log.path, tcti=tpm.tcti, ak=f"{AK_HANDLE:#x}", ak_cert=ak_cert, event_log=event_log)
    now = datetime.now(UTC)
    nonce = new_nonce(now)

    answer = agent.post("/evidence", {"nonce": nonce.hex()})

    assert answer.status_code == 200, answer.text
    evidence = answer.json()
    assert set(evidence) == {"quote", "event_log", "gpus", "gpu_spdm"}
    assert evidence["gpus"] == []
    verdict = verify(
        evidence=evidence,
        nonce=nonce,
        node=NODE,  # no GPUs enrolled
        reference=reference_values(parse_manifest(known_good_manifest(KNOWN_GOOD_BOOT))),
        # The boot alone: the GPUs' in-band evidence (of GPUs this node has not enrolled) is
        # test_host_gpu_evidence.py's; through the BMC there is none to read here.
        policy=replace(load_policy_file(settings.ATTESTATION_POLICY_FILE), gpu_evidence=("out_of_band",)),
        roots=roots,
        now=now,
    )
    assert verdict.failures == ()
    assert verdict.affirming


def test_the_inventory_lists_the_gpus_and_this_machines_drives_and_macs(start_agent, kernel_log):
    agent = start_agent(kernel_log.path, **NO_TPM)

    answer = agent.get("/inventory")

    assert answer.status_code == 200, answer.text
    inventory = answer.json()
    assert inventory["name"] == socket.gethostname()
    assert inventory["boot_source"] == "unknown"
    assert inventory["gpus"] == [
        {"index": index, "uuid": gpu.uuid, "serial": gpu.serial, "model": gpu.name, "cc_mode": "unknown"}
        for index, gpu in enumerate((h100(), v100()))
    ]
    # Whatever this machine has: the shape, and that each drive is one of its block devices.
    assert isinstance(inventory["drives"], list)
    for drive in inventory["drives"]:
        assert set(drive) == {"id", "capacity_bytes", "model", "serial", "last_erased_at"}
        assert (Path("/sys/block") / drive["id"]).exists()
        assert isinstance(drive["capacity_bytes"], int) and drive["capacity_bytes"] >= 0
        assert drive["last_erased_at"] is None
    assert isinstance(inventory["macs"], list)
    assert all(re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", mac) for mac in inventory["macs"])


def test_without_dcgm_there_are_no_diagnostics_and_the_agent_says_so(start_agent, kernel_log, tmp_path):
    agent = start_agent(kernel_log.path, **NO_TPM, dcgmi=str(tmp_path / "no-dcgm" / "dcgmi"))
    idle: dict = {"state": "idle", "started_at": None, "finished_at": None, "level": None, "results": []}

    refused = agent.post("/diagnostics", {"level": 1})

    assert refused.status_code == 501
    assert refused.headers["Content-Type"].startswith("application/json")
    assert refused.json()["detail"].startswith("DCGM is not installed: no diagnostics")
    assert "dcgmi diag" in refused.json()["detail"]
    assert agent.get("/diagnostics").json() == idle
    assert agent.post("/diagnostics", {"level": 7}).status_code == 400
    cancelled = agent.delete("/diagnostics")  # nothing to cancel: the run as it stands
    assert cancelled.status_code == 202 and cancelled.json() == idle


@pytest.fixture
def dcgmi(tmp_path, monkeypatch) -> Callable[..., Path]:
    """Puts the fake dcgmi (tests/agent/fake_dcgmi.py) first on the PATH, where the agent finds it by
    default; the returned function sets how it behaves, and gives the file its pid goes to."""
    directory = tmp_path / "dcgm"
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")

    def behave(**settings) -> Path:
        fake_dcgmi.install(directory, pid=str(tmp_path / "dcgmi-pid"), **settings)
        return tmp_path / "dcgmi-pid"

    return behave


@pytest.mark.parametrize("dcgm_format", ["4", "3"])
def test_diagnostics_run_dcgmi_diag_and_give_its_results_by_the_agents_gpu_index(
    start_agent, kernel_log, dcgmi, dcgm_format
):
    """DCGM's GPU 0 is the V100 here: its serial number, not DCGM's id, says which is the agent's GPU 1."""
    message = "GPU 0: PCIe bandwidth 3.1 GB/s is below the 10 GB/s expected"
    dcgmi(
        format=dcgm_format,
        seconds=0.2,
        gpus=[{"id": 0, "serial": "0323617004711"}, {"id": 1, "serial": "1652223012345"}],
        outcomes=[{"test": "pcie" if dcgm_format == "4" else "PCIe", "gpu": 0, "status": "Fail", "message": message}],
    )
    agent = start_agent(kernel_log.path, **NO_TPM)

    started = agent.post("/diagnostics", {"level": 2})

    assert started.status_code == 202
    assert started.json() | {"started_at": None} == {
        "state": "running", "started_at": None, "finished_at": None, "level": 2, "results": [],
    }  # fmt: skip
    done = agent.finished("diagnostics")
    assert done["state"] == "succeeded" and done["started_at"] == started.json()["started_at"]
    assert done["finished_at"] > done["started_at"]
    failed = [r for r in done["results"] if not r["passed"]]
    assert failed == [{"test": "pcie" if dcgm_format == "4" else "PCIe", "gpu": 1, "passed": False, "detail": message}]
    per_gpu = {(r["test"], r["gpu"]) for r in done["results"] if r["gpu"] is not None}
    assert {gpu for _, gpu in per_gpu} == {0, 1} and len(per_gpu) == (6 if dcgm_format == "4" else 4)


def test_a_failed_dcgmi_is_a_failed_run_without_results(start_agent, kernel_log, dcgmi):
    dcgmi(garbage="dcgmi: error while loading shared libraries: libdcgm.so.4", exit=127)
    agent = start_agent(kernel_log.path, **NO_TPM)

    assert agent.post("/diagnostics", {"level": 1}).status_code == 202

    done = agent.finished("diagnostics")
    assert done["state"] == "failed" and done["results"] == [] and done["level"] == 1
    assert "exited with 127" in done["detail"] and "host engine" in done["detail"]


def test_delete_cancels_a_running_run_and_its_dcgmi_and_operations_wait_for_each_other(
    start_agent, kernel_log, dcgmi, nvidia_smi
):
    pid_file = dcgmi(seconds=60)
    nvidia_smi("sleep 1; echo reset")
    agent = start_agent(kernel_log.path, **NO_TPM)
    started = agent.post("/diagnostics", {"level": 3}).json()
    until(pid_file.exists, "dcgmi started")
    pid = int(pid_file.read_text())

    assert agent.post("/diagnostics", {"level": 1}).status_code == 409
    refused = agent.post("/gpu-reset", {"gpu": 0})
    assert refused.status_code == 409 and refused.json()["detail"] == "a diagnostics run is running"
    assert agent.post("/gpu-wipe").json()["detail"] == "a diagnostics run is running"
    cancelled = agent.delete("/diagnostics")

    assert cancelled.status_code == 202
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["started_at"] == started["started_at"] and body["level"] == 3
    assert body["finished_at"] is not None and body["results"] == []
    until(lambda: not Path(f"/proc/{pid}").exists(), "dcgmi gone")
    assert agent.get("/diagnostics").json() == body
    assert agent.post("/gpu-reset", {"gpu": 0}).status_code == 202
    assert agent.post("/diagnostics", {"level": 1}).json()["detail"] == "a GPU reset is running"
    assert agent.finished("gpu-reset")["state"] == "succeeded"
