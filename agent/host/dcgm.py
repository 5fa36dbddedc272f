"""GPU diagnostics on a real server: DCGM's `dcgmi diag -r LEVEL -j`, run in the background.

Only where DCGM is installed (the datacenter-gpu-manager package, with nv-hostengine running):
`dcgmi` on the PATH, or wherever --dcgmi names it. Level N is DCGM's run level N: 1 short
(seconds), 2 medium (about 2 minutes), 3 long (about 15 minutes), 4 extended (1 to 2 hours).

A run is the dcgmi process, in a process group of its own, and a thread that waits for it. It
ends `succeeded` when DCGM gave its results, whatever they say: a failed test is a result
{"test", "gpu", "passed": false, "detail": DCGM's message}, from which the control plane
quarantines the node naming the test and GPU. It ends `failed` when DCGM gave no results (no
hostengine, a runtime error, output that is not its JSON): that is the tool's failure, not the
GPUs', so no result names a GPU, and the detail says what dcgmi said. A cancel sends the process
group SIGTERM (dcgmi then asks nv-hostengine to stop the run) and SIGKILL if it has not exited
within CANCEL_GRACE_S. Like the host backend's other operations, a run lives in memory: an agent
restarted mid-run answers `idle`.

DCGM's JSON, as dcgmi/Diag.cpp writes it (and nvvs/include/NvvsJsonStrings.h names its keys),
read in NVIDIA/DCGM at the tags v3.2.5, v3.3.9, v4.0.0 and v4.6.0:

    DCGM 4.x  {"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
              [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status",
              "warnings": [{"warning", "error_id", ...}], "info": [...]}], "test_summary":
              {"status", "warnings", "info"}}]}], "runtime_error"?}, "entity_groups": [{"entity_group",
              "entities": [{"entity_id", "serial_num"?}]}], "metadata": {...}}
    DCGM 3.3  {"DCGM GPU Diagnostic": {"test_categories": [... "results": [{"gpu_id": "0",
              "status", "warnings": [{"warning", ...}], "info": "..."}]]}, "GPU Device Serials":
              {"0": serial}, ...}; the Deployment category's tests (the software checks) have one
              result for the whole node, with "gpu_id" only when an error names a GPU, and their
              warning objects say "warnings" where the others say "warning".
    DCGM 3.2  as 3.3, but "gpu_ids": "0" and "warnings": "one message".

A status is "Pass", "Skip", "Warn", "Fail" or "Not Run" (3.x: "Pass", "Skip" or "Fail"). A test
skipped or not run passes, its detail saying so; Warn and Fail do not, nor any status unknown here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from ..backend import CANCELLED, FAILED, RUNNING, SUCCEEDED, Operation, Refused

log = logging.getLogger("gpu-agent")
LEVELS = (1, 2, 3, 4)
# dcgmi sends nv-hostengine the stop at once on SIGTERM, then waits for the run's end up to 25 s;
# the run stops whether or not dcgmi is still there to see it.
CANCEL_GRACE_S = 10.0
DETAIL_LINES = 5  # of what dcgmi wrote, in a failed run's detail
MAX_DETAIL_CHARS = 2000
_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
_DCGM_FE_GPU = 1  # dcgmlib/dcgm_fields.h: DCGM_FE_NONE = 0, DCGM_FE_GPU
_PASSING = {"Pass": "", "Skip": "skipped", "Not Run": "not run"}  # a passing status -> what its detail says


def not_installed(program: str) -> str:
    return (
        f"DCGM is not installed: no diagnostics ({program} is not found; they run `dcgmi diag`, of"
        " NVIDIA's datacenter-gpu-manager package, with nv-hostengine running)"
    )


class Unreadable(Exception):
    """dcgmi gave no results: its output is not DCGM's JSON (the message says how), or DCGM's JSON
    said why (`reported`: its runtime error, the message)."""

    def __init__(self, message: str, *, reported: bool = False):
        super().__init__(message)
        self.reported = reported


# -- DCGM's JSON --------------------------------------------------------------------------------------


def results(output: str, nvml_index_of_serial: dict[str, int] | None = None) -> list[dict]:
    """The results {"test", "gpu", "passed", "detail"} of `dcgmi diag -j`'s output, one per test
    and entity (for a test DCGM ran on the node as a whole, one with "gpu": None), in DCGM's order.

    "gpu" is the agent's GPU index, NVML's: DCGM numbers GPUs in NVML's order, so a DCGM GPU id is
    the NVML index; where DCGM gives the GPUs' serial numbers, the index is taken from the serial,
    so that the two cannot disagree. Raises Unreadable if there are no results to give."""
    document = _document(output)
    root = next((document[key] for key in _ROOTS if isinstance(document.get(key), dict)), None)
    if root is None:
        raise Unreadable(f"no {' or '.join(map(repr, _ROOTS))} object in dcgmi's JSON")
    if root.get("runtime_error"):
        raise Unreadable(_clip(str(root["runtime_error"]).strip()), reported=True)
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        raise Unreadable("dcgmi's JSON has no test_categories")
    serials = _serials(document)
    known = nvml_index_of_serial or {}

    def gpu_index(dcgm_id: int) -> int:
        return known.get(serials.get(dcgm_id, ""), dcgm_id)

    found = [
        result for category in categories for test in _list(category, "tests") for result in _test(test, gpu_index)
    ]
    if not found:
        raise Unreadable("dcgmi's JSON has no test results")
    return found


def _document(output: str) -> dict:
    # What dcgmi writes is one JSON object; anything around it (a warning of its own) is let be.
    start, end = output.find("{"), output.rfind("}")
    if start < 0:
        raise Unreadable("dcgmi wrote no JSON")
    try:
        document = json.loads(output[start : end + 1] if end > start else output[start:])
    except ValueError as error:
        raise Unreadable(f"dcgmi's JSON does not parse: {error}") from None
    if not isinstance(document, dict):
        raise Unreadable("dcgmi's JSON is not an object")
    return document


def _object(holder: object) -> dict:
    if not isinstance(holder, dict):
        raise Unreadable(f"dcgmi's JSON has {_clip(json.dumps(holder), 100)} where an object should be")
    return holder


def _list(holder: object, key: str) -> list:
    value = _object(holder).get(key, [])
    if not isinstance(value, list):
        raise Unreadable(f"dcgmi's JSON has a {key!r} that is not a list")
    return value


def _serials(document: dict) -> dict[int, str]:
    """DCGM's GPU id -> the GPU's serial number, where dcgmi gives them."""
    serials: dict[int, str] = {}
    old = document.get("GPU Device Serials")  # 3.x: {"0": serial}
    if isinstance(old, dict):
        serials.update({int(k): v for k, v in old.items() if k.isdigit() and isinstance(v, str)})
    groups = document.get("entity_groups")  # 4.x
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and _is_gpu(group) and isinstance(group.get("entities"), list):
            for entity in group["entities"]:
                if isinstance(entity, dict) and (dcgm_id := _whole(entity.get("entity_id"))) is not None:
                    serials[dcgm_id] = str(entity.get("serial_num", ""))
    return {dcgm_id: serial for dcgm_id, serial in serials.items() if serial}


def _test(holder: object, gpu_index: Callable[[int], int]) -> Iterator[dict]:
    test = _object(holder)
    entries = _list(test, "results")
    name = test.get("name")
    if not isinstance(name, str) or not name:
        raise Unreadable("dcgmi's JSON has a test without a name")
    found = [_result(name, entry, gpu_index) for entry in entries if _status(entry) != "Not Run"]
    summary = test.get("test_summary")  # 4.x: the test's own status, with errors tied to no entity
    if isinstance(summary, dict) and (not found or all(r["passed"] for r in found)):
        overall = _result(name, summary, gpu_index)
        if not found or not overall["passed"]:  # else what it says, the per-GPU results said
            found.append(overall)
    yield from found


def _status(entry: object) -> object:
    return entry.get("status") if isinstance(entry, dict) else None


def _result(test: str, entry: object, gpu_index: Callable[[int], int]) -> dict:
    if not isinstance(entry, dict):
        raise Unreadable(f"dcgmi's JSON has a result of {test} that is not an object")
    gpu, other = _entity(entry, gpu_index)
    status = entry.get("status")
    said = "; ".join(_messages(entry.get("warnings")) + _messages(entry.get("info")))
    if status == "Pass":
        passed, detail = True, ""
    elif status in _PASSING:
        passed, detail = True, ": ".join(filter(None, (_PASSING[status], said)))
    elif status in ("Fail", "Warn"):
        passed, detail = False, said or f"DCGM's status: {status}"
    else:
        passed, detail = False, f"DCGM's status {status!r}, unknown to gpu-agent" + (f": {said}" if said else "")
    if other:
        detail = f"{other}: {detail}" if detail else other
    return {"test": test, "gpu": gpu, "passed": passed, "detail": _clip(detail)}


def _entity(entry: dict, gpu_index: Callable[[int], int]) -> tuple[int | None, str]:
    """The agent's GPU index of a result (None: not a GPU's), and what else it is about (a CPU...)."""
    if "entity_group" in entry or "entity_group_id" in entry:  # 4.x
        entity_id = _whole(entry.get("entity_id"))
        if _is_gpu(entry) and entity_id is not None:
            return gpu_index(entity_id), ""
        return None, f"{entry.get('entity_group', entry.get('entity_group_id'))} {entry.get('entity_id')}"
    for key in ("gpu_id", "gpu_ids"):  # 3.3, 3.2: "0"; a software check names no GPU, or -1
        if key in entry:
            dcgm_id = _whole(entry[key])
            return (gpu_index(dcgm_id) if dcgm_id is not None else None), ""
    return None, ""


def _is_gpu(entry: dict) -> bool:
    return entry.get("entity_group") == "GPU" or entry.get("entity_group_id") == _DCGM_FE_GPU


def _whole(value: object) -> int | None:
    """A non-negative id, which DCGM writes as a number or (3.x) a string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _messages(value: object) -> list[str]:
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, dict):
        # {"warning": message, "error_id", ...}; 3.3's Deployment tests say "warnings".
        message = value.get("warning", value.get("warnings"))
        return _messages(message) if message is not None else [_clip(json.dumps(value), 200)]
    if isinstance(value, list):
        return [message for item in value for message in _messages(item)]
    return []


def _clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_lines(*outputs: str) -> str:
    for output in outputs:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        if lines:
            return _clip("; ".join(lines[-DETAIL_LINES:]))
    return "no output"


# -- the run ------------------------------------------------------------------------------------------


@dataclass
class _Run:
    process: subprocess.Popen
    command: str
    exited: threading.Event = field(default_factory=threading.Event)


class Diagnostics:
    """One `dcgmi diag` at a time, and its state for GET /diagnostics; thread-safe.

    `program` is looked for at each start (shutil.which), so DCGM installed after the agent
    started is used without a restart. `nvml_index_of_serial` maps GPU serial numbers to the
    agent's indexes (see results()).
    """

    what = "a diagnostics run"

    def __init__(
        self,
        program: str = "dcgmi",
        *,
        nvml_index_of_serial: dict[str, int] | None = None,
        cancel_grace_s: float = CANCEL_GRACE_S,
    ):
        self.program = program
        self.nvml_index_of_serial = {s: i for s, i in (nvml_index_of_serial or {}).items() if s}
        self.cancel_grace_s = cancel_grace_s
        self._lock = threading.Lock()
        self._operation = Operation()
        self._run: _Run | None = None

    @property
    def operation(self) -> Operation:
        with self._lock:
            return self._operation

    def installed(self) -> str | None:
        """dcgmi's path, or None where DCGM is not installed."""
        return shutil.which(self.program)

    def start(self, level: int) -> Operation:
        if level not in LEVELS:
            raise Refused("'level' must be 1, 2, 3 or 4", status=400)
        path = self.installed()
        if path is None:
            raise Refused(not_installed(self.program), status=501)
        command = [path, "diag", "-r", str(level), "-j"]
        with self._lock:
            if self._operation.state == RUNNING:
                raise Refused(f"{self.what} is already running")
            if self._run is not None and not self._run.exited.is_set():
                raise Refused("the cancelled diagnostics run's dcgmi is still stopping: try again in a few seconds")
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    start_new_session=True,  # its own process group, which a cancel signals whole
                )
            except OSError as error:  # found, yet not runnable: the run fails as a dcgmi that fails at once
                now = time.time()
                self._run = None
                self._operation = Operation(
                    state=FAILED, started_at=now, finished_at=now, level=level, detail=f"cannot run {path}: {error}"
                )
                return self._operation
            run = self._run = _Run(process, " ".join(command))
            self._operation = Operation(state=RUNNING, started_at=time.time(), level=level)
            started = self._operation
        log.info("%s started: %s (pid %d)", self.what, run.command, process.pid)
        threading.Thread(target=self._wait, args=(run, level), name=self.what, daemon=True).start()
        return started

    def cancel(self) -> Operation:
        """Stop a running run: its state is "cancelled" at once, and its process group gets SIGTERM,
        then SIGKILL if it has not exited within cancel_grace_s. Any other run is given as it stands."""
        with self._lock:
            run = self._run
            if self._operation.state != RUNNING or run is None:
                return self._operation
            self._operation = replace(
                self._operation, state=CANCELLED, finished_at=time.time(), detail="cancelled on request"
            )
            cancelled = self._operation
            _signal_group(run, signal.SIGTERM)
        log.info("%s cancelled: sent SIGTERM to %s (pid %d)", self.what, run.command, run.process.pid)
        threading.Thread(target=self._kill_if_stuck, args=(run,), name="dcgmi cancel", daemon=True).start()
        return cancelled

    def _kill_if_stuck(self, run: _Run) -> None:
        if run.exited.wait(self.cancel_grace_s):
            return
        with self._lock:  # exited is set under it; _signal_group sees whether dcgmi was reaped before
            if run.exited.is_set():
                return
            log.warning("%s did not stop within %g s of SIGTERM: SIGKILL", run.command, self.cancel_grace_s)
            _signal_group(run, signal.SIGKILL)

    def _wait(self, run: _Run, level: int) -> None:
        stdout, stderr = run.process.communicate()
        with self._lock:
            run.exited.set()
            if self._run is not run or self._operation.state != RUNNING:  # cancelled meanwhile
                log.info("%s (cancelled) exited with %s", run.command, run.process.returncode)
                return
        state, found, detail = self._outcome(run.process.returncode, stdout, stderr)
        log.info("the level %d diagnostics run %s: %s", level, state, detail or f"{len(found)} results")
        with self._lock:
            if self._run is run and self._operation.state == RUNNING:
                self._operation = replace(
                    self._operation, state=state, finished_at=time.time(), detail=detail, results=tuple(found)
                )

    def _outcome(self, returncode: int, stdout: str, stderr: str) -> tuple[str, list[dict], str]:
        if returncode < 0:
            return FAILED, [], f"dcgmi was killed by {_signal_name(-returncode)}"
        try:
            found = results(stdout, self.nvml_index_of_serial)
        except Unreadable as error:
            if error.reported:
                return FAILED, [], f"dcgmi diag exited with {returncode}, without results: {error}"
            said = _last_lines(stderr, stdout)
            return FAILED, [], f"dcgmi diag exited with {returncode}, without results ({error}): {said}"
        if returncode != 0 and all(r["passed"] for r in found):
            # dcgmi exits non-zero when a test failed; this says something went wrong besides.
            return FAILED, [], f"dcgmi diag exited with {returncode}, every test passing: {_last_lines(stderr, stdout)}"
        return SUCCEEDED, found, ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _signal_group(run: _Run, signum: signal.Signals) -> None:
    """Signal the run's process group (dcgmi and whatever it started), unless dcgmi has been reaped:
    the group's id is dcgmi's pid, which the system may then give another process."""
    if run.process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):  # the group gone meanwhile
        os.killpg(run.process.pid, signum)
