"""deploy/prometheus and deploy/alertmanager, checked by Debian's promtool and amtool and run for real.

The tools are required: a missing one fails the test (`.ci/run` installs the Debian packages
prometheus and prometheus-alertmanager). Plain pytest, no Django.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from core.metrics_ca import ensure as ensure_metrics_ca
from remediation.rules import ALERTS, XID_ALERTS, XIDS, Alert, Step, decide, parse_webhook, xids_of
from tests.support import REPO_ROOT
from tests.support.bmcsim import Bmcsim, agents_tls, start_bmcsim
from tests.support.loopback import serving
from tests.support.ports import free_port
from tests.support.processes import Process, start_alertmanager, start_prometheus, tool

PROMETHEUS_DIR = REPO_ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
RULE_TESTS = PROMETHEUS_DIR / "rules" / "tests" / "gpu_test.yml"
ALERTMANAGER_CONFIG = REPO_ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
TOKEN = "test-webhook-token"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


# The tools' own checks.


def test_promtool_accepts_the_prometheus_config(tmp_path):
    """Checked as `make demo` runs it, beside the files it makes in var/ (promtool checks they exist)."""
    shutil.copytree(PROMETHEUS_DIR, tmp_path / "deploy" / "prometheus")
    ensure_metrics_ca(tmp_path / "var" / "metrics-ca")
    (tmp_path / "var" / "prometheus-token").write_text("a-token\n")
    result = run(tool("promtool"), "check", "config", str(tmp_path / "deploy" / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules():
    assert RULE_FILES
    result = run(tool("promtool"), "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_their_promtool_unit_tests():
    result = run(tool("promtool"), "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_amtool_accepts_the_alertmanager_config():
    result = run(tool("amtool"), "check-config", str(ALERTMANAGER_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_would_catch_a_broken_rule(tmp_path):
    """The checks above can fail: a rule file with a PromQL error is refused."""
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: up ==\n")
    assert run(tool("promtool"), "check", "rules", str(broken)).returncode != 0


# The alert rules and remediation.rules agree.


def alert_rules() -> dict[str, str]:
    """Alert name -> its rule's text in gpu.yml (no YAML library in the project, and none needed)."""
    text = (PROMETHEUS_DIR / "rules" / "gpu.yml").read_text()
    chunks = re.split(r"^\s*- alert: ", text, flags=re.MULTILINE)[1:]
    return {chunk.split("\n", 1)[0].strip(): chunk for chunk in chunks}


def test_every_alert_has_a_rule_and_every_rule_an_alert():
    assert set(alert_rules()) == set(ALERTS) | set(XID_ALERTS)


@pytest.mark.parametrize("name", XID_ALERTS)
def test_xid_alerts_select_exactly_the_xids_of_their_ladders(name):
    selectors = re.findall(r'xid=~"([^"]*)"', alert_rules()[name])
    assert selectors
    for selector in selectors:
        assert {int(xid) for xid in selector.split("|")} == xids_of(name)


def test_every_xid_that_calls_for_something_has_an_alert():
    alerted = frozenset().union(*(xids_of(name) for name in XID_ALERTS))
    assert {xid for xid, rule in XIDS.items() if rule.ladder != "none"} == alerted
    assert {48, 62, 64, 74, 79, 92, 94, 95, 119, 120, 13, 31} <= alerted


def test_no_xid_alert_reads_the_last_xid_gauge():
    for name in XID_ALERTS:
        assert "DCGM_FI_DEV_XID_ERRORS" not in alert_rules()[name]


def test_each_alerts_ladder_label_names_the_ladders_rules_py_takes():
    ladders = {name: rule.ladder for name, rule in ALERTS.items()}
    ladders |= {name: ",".join(sorted(names)) for name, names in XID_ALERTS.items()}
    for name, rule_text in alert_rules().items():
        ladder = re.search(r"^\s*ladder: (\S+)$", rule_text, flags=re.MULTILINE)
        assert ladder is not None and ladder.group(1) == ladders[name], name


def test_xid_table_cites_nvidias_action_for_every_xid():
    buckets = {"RESTART_APP", "RESET_GPU", "RESTART_BM", "IGNORE", "CONTACT_SUPPORT", "CHECK_MECHANICALS"}
    for xid, rule in XIDS.items():
        assert rule.nvidia_action in buckets or rule.nvidia_action.startswith("WORKFLOW_"), xid
        assert rule.what, xid


# The whole path, for real: bmcsim's agents -> Prometheus (targets from http_sd) -> Alertmanager
# -> the webhook, whose payload remediation.rules accepts and acts on.


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


class Recorder(ThreadingHTTPServer):
    """Serves the http_sd target list on GET and records every POST (the webhook)."""

    def __init__(self, targets: list[dict]):
        self.targets = json.dumps(targets).encode()
        self.posts: queue.Queue[tuple[str, str | None, dict]] = queue.Queue()
        super().__init__(("127.0.0.1", 0), RecorderHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class RecorderHandler(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.targets)))
        self.end_headers()
        self.wfile.write(self.server.targets)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.posts.put((self.path, self.headers.get("Authorization"), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def pipeline(tmp_path) -> Iterator[tuple[str, Recorder]]:
    """bmcsim with two nodes, Prometheus and Alertmanager from deploy/, with only their addresses
    rewritten: Prometheus scrapes the agents over bmcsim's TLS listener with the certificate of the
    metrics CA (tests.support.bmcsim.agents_tls)."""
    for name in ("prometheus", "prometheus-alertmanager"):
        tool(name)
    bmcsim_port, prometheus_port, alertmanager_port = free_port(), free_port(), free_port()
    metrics_port, metrics_ca = agents_tls(tmp_path / "bmcsim")
    bmcsim_url = f"http://127.0.0.1:{bmcsim_port}"
    targets = [
        {
            "targets": [f"127.0.0.1:{bmcsim_port}"],
            "labels": {"node": node, "pod": "p1", "rack": "r01", "__metrics_path__": f"/agent/{node}/metrics"},
        }
        for node in ("node-001", "node-002")
    ]
    recorder = Recorder(targets)

    # Same folder layout as the repository, so relative paths in the configs resolve as they do there.
    shutil.copytree(PROMETHEUS_DIR / "rules", tmp_path / "deploy" / "prometheus" / "rules")
    prometheus_config = tmp_path / "deploy" / "prometheus" / "prometheus.yml"
    prometheus_config.write_text(
        PROMETHEUS_CONFIG.read_text()
        .replace("http://127.0.0.1:8000/v1/prometheus/targets", f"{recorder.url}/v1/prometheus/targets")
        .replace("127.0.0.1:8000", "127.0.0.1:1")
        .replace("../../var/metrics-ca", str(metrics_ca.directory))
        .replace('regex: "(.+):8100"', f'regex: "(.+):{bmcsim_port}"')
        .replace(":8143", f":{metrics_port}")
        .replace("127.0.0.1:9093", f"127.0.0.1:{alertmanager_port}")
    )
    alertmanager_config = tmp_path / "deploy" / "alertmanager" / "alertmanager.yml"
    alertmanager_config.parent.mkdir(parents=True)
    alertmanager_config.write_text(ALERTMANAGER_CONFIG.read_text().replace("http://127.0.0.1:8000", recorder.url))
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "webhook-token").write_text(TOKEN + "\n")
    (tmp_path / "var" / "prometheus-token").write_text("the-recorders-prometheus-token\n")  # the recorder checks none

    processes: list[Bmcsim | Process] = []
    with serving(recorder):
        try:
            processes.append(start_bmcsim(tmp_path / "bmcsim", nodes=2, port=bmcsim_port))
            processes.append(
                start_alertmanager(alertmanager_config, tmp_path / "alertmanager", alertmanager_port, tmp_path)
            )
            processes.append(start_prometheus(prometheus_config, tmp_path / "prometheus", prometheus_port, tmp_path))
            prometheus_url = f"http://127.0.0.1:{prometheus_port}"

            def both_agents_up() -> bool:
                answer = requests.get(
                    f"{prometheus_url}/api/v1/query", params={"query": 'up{job="node-agents"}'}, timeout=2
                )
                results = answer.json()["data"]["result"]
                return sorted((r["metric"]["node"], r["value"][1]) for r in results) == [
                    ("node-001", "1"),
                    ("node-002", "1"),
                ]

            wait_until(both_agents_up, 30, "Prometheus to scrape both agents through http_sd")
            yield bmcsim_url, recorder
        finally:
            for process in reversed(processes):
                process.stop()


def inject_xid(bmcsim_url: str, node: str, gpu: int, xid: int) -> None:
    answer = requests.post(
        f"{bmcsim_url}/bmcsim/v1/faults", json={"node": node, "kind": "xid", "gpu": gpu, "xid": xid}, timeout=5
    )
    assert answer.status_code in (200, 201), answer.text


@pytest.mark.e2e
def test_xid_79_through_prometheus_and_alertmanager_reaches_the_webhook_and_reboots(pipeline):
    bmcsim_url, recorder = pipeline
    inject_xid(bmcsim_url, "node-002", 1, 43)  # informational: must not be sent
    injected = time.monotonic()
    inject_xid(bmcsim_url, "node-001", 3, 79)

    path, authorization, payload = recorder.posts.get(timeout=30)
    print(f"XID 79 injected -> webhook called in {time.monotonic() - injected:.1f} s")
    assert path == "/v1/alerts/alertmanager"
    assert authorization == f"Bearer {TOKEN}"
    [alert] = parse_webhook(payload)
    assert isinstance(alert, Alert)
    assert alert.name == "GPUFatalXid"
    assert {k: alert.labels[k] for k in ("node", "pod", "rack", "gpu", "xid")} == {
        "node": "node-001",
        "pod": "p1",
        "rack": "r01",
        "gpu": "3",
        "xid": "79",
    }
    decision = decide(alert)
    assert (decision.step, decision.node, decision.gpu) == (Step.REBOOT, "node-001", 3)

    time.sleep(3)  # several evaluation and group intervals: the XID 43 alert would have come by now
    while not recorder.posts.empty():
        for other in parse_webhook(recorder.posts.get()[2]):
            assert isinstance(other, Alert) and other.labels.get("xid") != "43"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("kind", "alert_name"), [("ecc_dbe", "GPUUncorrectableECC"), ("row_remap_failure", "GPURowRemapFailure")]
)
def test_memory_faults_read_from_dcgm_exporters_fields_reach_the_webhook(pipeline, kind, alert_name):
    """The two rules that read dcgm-exporter's fields rather than the agent's XID counter."""
    bmcsim_url, recorder = pipeline
    time.sleep(2)  # a scrape of the fault-free counter first: increase() needs the 0 before the 1
    answer = requests.post(f"{bmcsim_url}/bmcsim/v1/faults", json={"node": "node-002", "kind": kind, "gpu": 5})
    assert answer.status_code == 201, answer.text
    _, _, payload = recorder.posts.get(timeout=30)
    [alert] = parse_webhook(payload)
    assert isinstance(alert, Alert)
    assert (alert.name, alert.labels["node"], alert.labels["gpu"]) == (alert_name, "node-002", "5")
    decision = decide(alert)
    first_rung = {"GPUUncorrectableECC": Step.GPU_RESET, "GPURowRemapFailure": Step.QUARANTINE}[alert_name]
    assert (decision.step, decision.node, decision.gpu) == (first_rung, "node-002", 5)
