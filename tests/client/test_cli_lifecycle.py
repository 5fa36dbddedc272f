"""A reservation's life through `gpufleet`, against the live control plane: reserve, list, show,
extend, release, in tables and as JSON; and every way a command fails, with its exit status."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from gpufleet_client.cli import main

from core.topology import GPU_MODEL
from fleet.models import Image, Node
from reservations import services
from reservations.models import Quota, Reservation, Tenant
from tests.client.conftest import GPUFLEET
from tests.support.factories import drive
from tests.support.loopback import serving
from tests.support.ports import free_port


def table_rows(text: str) -> list[list[str]]:
    """A table's rows, header first, each split on its runs of blanks."""
    return [line.split() for line in text.splitlines() if line.strip()]


def test_reserve_list_show_extend_release_in_tables(acme, available_fleet, broker):
    reserved = acme.run("reserve", "--nodes", "2", "--pod", "p1", "--hours", "2")
    assert reserved.returncode == 0, reserved.stderr
    reservation = Reservation.objects.get()
    assert reservation.pod is not None and reservation.starts_at is not None and reservation.ends_at is not None
    assert (reservation.node_count, reservation.pod.name, reservation.state) == (2, "p1", "provisioning")
    assert abs(reservation.ends_at - reservation.starts_at - timedelta(hours=2)) < timedelta(minutes=1)
    summary = dict(line.split(None, 1) for line in reserved.stdout.split("\n\n")[0].splitlines())
    assert summary["id"] == str(reservation.pk) and summary["state"] == "provisioning"
    assert summary["nodes"] == "0/2 up" and summary["pod"] == "p1"
    machines = table_rows(reserved.stdout.split("\n\n")[1])
    assert machines[0] == ["NODE", "STATE", "ADDRESS", "SSH", "PORT", "HOST", "KEY"]
    assert sorted(row[0] for row in machines[1:]) == sorted(
        Node.objects.filter(reservation=reservation).values_list("name", flat=True)
    )

    listed = acme.run("list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = table_rows(listed.stdout)
    assert header == ["ID", "STATE", "NODES", "POD", "STARTS", "ENDS", "IMAGE"]
    assert [row[:4] for row in rows] == [[str(reservation.pk), "provisioning", "2", "p1"]]
    # the columns line up: every row's cells start where the header's do
    lines = listed.stdout.splitlines()
    assert lines[1].index("provisioning") == lines[0].index("STATE")

    shown = acme.run("show", str(reservation.pk))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == reserved.stdout

    new_end = (reservation.ends_at + timedelta(hours=3)).astimezone(UTC).replace(microsecond=0)
    extended = acme.run("extend", str(reservation.pk), "--ends-at", new_end.isoformat())
    assert extended.returncode == 0, extended.stderr
    reservation.refresh_from_db()
    assert reservation.ends_at == new_end
    assert f"ends        {new_end:%Y-%m-%d %H:%M:%S}Z" in extended.stdout

    later = acme.run("extend", str(reservation.pk), "--hours", "1.5")
    assert later.returncode == 0, later.stderr
    reservation.refresh_from_db()
    assert reservation.ends_at == new_end + timedelta(hours=1.5)

    released = acme.run("release", str(reservation.pk))
    assert released.returncode == 0, released.stderr
    assert "state       released" in released.stdout
    assert Reservation.objects.get().state == "released"


def test_every_command_prints_the_servers_json_as_is_with_json(acme, available_fleet, broker, live_server):
    token = acme.env["GPUFLEET_TOKEN"]

    def server(path: str):
        return requests.get(live_server.url + path, headers={"Authorization": f"Token {token}"}, timeout=10).json()

    reserved = acme.run("reserve", "--nodes", "1", "--json")
    assert reserved.returncode == 0, reserved.stderr
    created = json.loads(reserved.stdout)
    rid = created["id"]
    assert created == server(f"/v1/reservations/{rid}")

    assert json.loads(acme.run("list", "--json").stdout) == server("/v1/reservations")
    assert json.loads(acme.run("show", str(rid), "--json").stdout) == server(f"/v1/reservations/{rid}")
    assert json.loads(acme.run("--json", "show", str(rid)).stdout) == server(f"/v1/reservations/{rid}")
    assert json.loads(acme.run("capacity", "--json").stdout) == server("/v1/capacity")
    assert json.loads(acme.run("quota", "--json").stdout) == server("/v1/quota")

    end = datetime.fromisoformat(created["ends_at"]) - timedelta(hours=1)
    extended = json.loads(acme.run("extend", str(rid), "--ends-at", end.isoformat(), "--json").stdout)
    assert extended == server(f"/v1/reservations/{rid}") and datetime.fromisoformat(extended["ends_at"]) == end

    released = json.loads(acme.run("release", str(rid), "--json").stdout)
    assert released["state"] == "released" and released == server(f"/v1/reservations/{rid}")


def test_every_reserve_sends_a_new_idempotency_key(acme, available_fleet, broker):
    """Two identical requests are two reservations: the key makes retries safe, not repeats impossible."""
    for _ in range(2):
        assert acme.run("reserve", "--nodes", "1", "--pod", "p2").returncode == 0
    assert Reservation.objects.count() == 2


def test_reserve_sends_every_option(acme, available_fleet, broker, tmp_path):
    Image.objects.create(name="rocky-9", os="rocky-9", url="http://images.example/rocky-9.iso", sha256="ab" * 32)
    public_key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    key = services.add_ssh_key(tenant=Tenant.objects.get(name="acme"), name="laptop", public_key=public_key.decode())
    user_data = tmp_path / "init.yaml"
    user_data.write_text("#cloud-config\nruncmd: [touch /ready]\n")
    starts = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    completed = acme.run(
        "reserve",
        "--nodes", "8",
        "--rack-scale",
        "--starts-at", starts.isoformat(),
        "--hours", "5",
        "--image", "rocky-9",
        "--ssh-key", str(key.pk),
        "--user-data-file", str(user_data),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    reservation = Reservation.objects.get()
    assert (reservation.node_count, reservation.rack_scale, reservation.state) == (8, True, "pending")
    assert (reservation.starts_at, reservation.ends_at) == (starts, starts + timedelta(hours=5))
    assert reservation.image is not None
    assert reservation.image.name == "rocky-9" and list(reservation.ssh_keys.all()) == [key]
    assert reservation.user_data == user_data.read_text()


def test_reserve_sends_levels_and_selectors_and_show_prints_them(acme, available_fleet, broker):
    Node.objects.filter(name__in=["node-011", "node-012"]).update(attributes={"nic": "cx8"})
    completed = acme.run(
        "reserve",
        "--nodes", "2",
        "--required", "leaf",
        "--preferred", "nvlink_domain",
        "--gpu-model", GPU_MODEL,
        "--attribute", "nic=cx8",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    reservation = Reservation.objects.get()
    assert (reservation.required_level, reservation.preferred_level, reservation.placed_in) == (
        "leaf",
        "nvlink_domain",
        "p2-leaf1",
    )
    assert (reservation.gpu_model, reservation.attributes) == (GPU_MODEL, {"nic": "cx8"})
    shown = acme.run("show", str(reservation.pk)).stdout
    for said in "p2-leaf1", "required leaf, preferred nvlink_domain", "nic=cx8", GPU_MODEL:
        assert said in shown, said

    bad = acme.run("reserve", "--nodes", "1", "--attribute", "nic")
    assert bad.returncode == 2 and "is not NAME=VALUE" in bad.stderr


def test_capacity_prints_the_fabric_domains_under_the_pods(anonymous, available_fleet):
    completed = anonymous.run("capacity")
    assert completed.returncode == 0, completed.stderr
    domains = completed.stdout.split("\n\n")[1]
    assert table_rows(domains) == [
        ["DOMAIN", "LEVEL", "NODES", "FREE"],
        ["p1-leaf1", "leaf", "8", "8"],
        ["p2-leaf1", "leaf", "4", "4"],
    ]


def test_a_reservation_that_cannot_be_placed_exits_1_with_the_servers_detail(acme, available_fleet):
    completed = acme.run("reserve", "--nodes", "40")
    assert completed.returncode == 1
    assert completed.stdout == ""
    first = completed.stderr.splitlines()[0]
    assert first.startswith("gpufleet: ") and "40" in first and first.endswith("(409)")
    assert "Traceback" not in completed.stderr
    assert not Reservation.objects.exists()


def test_a_bad_value_is_refused_by_the_server_with_its_field_named(acme, available_fleet):
    completed = acme.run("reserve", "--nodes", "1", "--pod", "p9")
    assert completed.returncode == 1
    assert completed.stderr.startswith("gpufleet: pod: ") and completed.stderr.rstrip().endswith("(400)")


def test_an_unknown_reservation_exits_3(acme, globex, available_fleet, broker):
    for command in (["show", "999999"], ["release", "999999"], ["extend", "999999", "--hours", "1"]):
        completed = acme.run(*command)
        assert completed.returncode == 3, command
        assert completed.stderr.startswith("gpufleet: ") and "(404)" in completed.stderr
    # another tenant's reservation is not found either
    assert acme.run("reserve", "--nodes", "1").returncode == 0
    assert globex.run("show", str(Reservation.objects.get().pk)).returncode == 3


def test_no_token_exits_2_saying_where_to_put_one(anonymous):
    completed = anonymous.run("list")
    assert completed.returncode == 2
    assert 'no API key: set GPUFLEET_KEY, or put key = "gf_..." in ' in completed.stderr
    assert anonymous.env["XDG_CONFIG_HOME"] + "/gpufleet/config.toml" in completed.stderr
    assert "Traceback" not in completed.stderr

    quota = anonymous.run("quota")
    assert quota.returncode == 2 and "no API key" in quota.stderr


def test_capacity_needs_no_token(anonymous, available_fleet):
    completed = anonymous.run("capacity")
    assert completed.returncode == 0, completed.stderr
    assert table_rows(completed.stdout.split("\n\n")[0]) == [
        ["POD", "NODES", "FREE", "FREE", "OPEN-ENDED", "WHOLE", "FREE", "RACKS"],
        ["p1", "8", "8", "8", "1"],
        ["p2", "4", "4", "4", "1"],
    ]


def test_the_config_file_gives_the_server_and_the_token(acme, tmp_path):
    config = tmp_path / "xdg" / "gpufleet" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'url = "{acme.env["GPUFLEET_URL"]}"\ntoken = "{acme.env["GPUFLEET_TOKEN"]}"\n')
    env = {k: v for k, v in acme.env.items() if not k.startswith("GPUFLEET_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    completed = subprocess.run([str(GPUFLEET), "quota"], env=env, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr

    # ~/.config/gpufleet/config.toml when XDG_CONFIG_HOME is not set
    del env["XDG_CONFIG_HOME"]
    home_config = tmp_path / "home2" / ".config" / "gpufleet" / "config.toml"
    home_config.parent.mkdir(parents=True)
    home_config.write_text(config.read_text())
    env["HOME"] = str(tmp_path / "home2")
    completed = subprocess.run([str(GPUFLEET), "quota"], env=env, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr

    # the environment wins over the file
    bad = acme.run("quota", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "GPUFLEET_TOKEN": "not-a-token"})
    assert bad.returncode == 1 and "invalid key (401)" in bad.stderr


def test_a_config_file_that_is_not_toml_exits_2(acme, tmp_path):
    config = tmp_path / "xdg" / "gpufleet" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("token = \n")
    completed = acme.run("quota", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"gpufleet: {config} is not TOML: ")


def test_a_server_that_cannot_be_reached_exits_4(acme):
    completed = acme.run("list", env={"GPUFLEET_URL": f"http://127.0.0.1:{free_port()}"})
    assert completed.returncode == 4
    assert "could not reach http://127.0.0.1:" in completed.stderr and "Connection refused" in completed.stderr
    assert "Traceback" not in completed.stderr


class Failing(BaseHTTPRequestHandler):
    """A proxy in front of a control plane that is down: 502, in HTML."""

    def do_GET(self):
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_server_error_exits_4(acme):
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    with serving(proxy) as url:
        completed = acme.run("capacity", env={"GPUFLEET_URL": url})
    assert completed.returncode == 4
    assert completed.stderr == "gpufleet: 502 Bad Gateway (502)\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["reserve"], "the following arguments are required: --nodes"),
        (["reserve", "--nodes", "0"], "'0' is not a positive whole number"),
        (["reserve", "--nodes", "1", "--ends-at", "tomorrow"], "'tomorrow' is not an ISO 8601 time"),
        (["reserve", "--nodes", "1", "--hours", "2", "--ends-at", "2030-01-01T00:00Z"], "not allowed with argument"),
        (["show", "twelve"], "'twelve' is not a positive whole number"),
        (["extend", "1"], "say what to change"),
        (["webhooks", "add", "https://example.com/hook"], "the following arguments are required: --event"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_before_anything_is_sent(acme, args, says):
    completed = acme.run(*args)
    assert completed.returncode == 2
    assert says in completed.stderr
    assert "Traceback" not in completed.stderr


def test_help_documents_the_exit_statuses(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for line in ("0  done", "1  refused by the server", "2  usage error", "3  not found (404)", "4  the server"):
        assert line in out
    assert "3 genuine but contraindicated" in out
    assert main([]) == 2  # no command: the help, on stderr


def test_a_user_data_file_that_cannot_be_read_exits_2(acme, tmp_path):
    completed = acme.run("reserve", "--nodes", "1", "--user-data-file", str(tmp_path / "missing.yaml"))
    assert completed.returncode == 2
    assert "missing.yaml: No such file or directory" in completed.stderr


# -- reserve --wait -------------------------------------------------------------------------


def lines_of(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_line(lines: queue.Queue, timeout: float = 30) -> str | None:
    return lines.get(timeout=timeout)


def finished(process) -> str:
    """Its stdout, once it exits (its stderr is the reader thread's: communicate() would take lines from it)."""
    stdout = process.stdout.read()
    process.wait(timeout=30)
    return stdout


def wait_for(condition, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_reserve_wait_shows_progress_until_every_node_is_up(acme, available_fleet, broker):
    process = acme.popen("reserve", "--nodes", "2", "--pod", "p2", "--wait", "--interval", "0.1", "--timeout", "60")
    progress = lines_of(process.stderr)
    try:
        reservation = wait_for(lambda: Reservation.objects.first())
        assert next_line(progress) == f"reservation {reservation.pk}: provisioning, 0/2 nodes up"
        first, second = Node.objects.filter(reservation=reservation).order_by("name")
        drive(first, "provision_succeeded")  # what the provisioning workflow does, node by node
        assert next_line(progress) == f"reservation {reservation.pk}: provisioning, 1/2 nodes up"
        drive(second, "provision_succeeded")  # the last node up settles the reservation
        assert next_line(progress) == f"reservation {reservation.pk}: active, 2/2 nodes up"
        stdout = finished(process)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0
    assert stdout.splitlines()[1].split() == ["state", "active"]
    assert next_line(progress) is None  # nothing more on stderr


def test_reserve_wait_fails_when_the_reservation_is_released_meanwhile(acme, available_fleet, broker):
    process = acme.popen("reserve", "--nodes", "1", "--wait", "--interval", "0.1", "--timeout", "60")
    progress = lines_of(process.stderr)
    try:
        reservation = wait_for(lambda: Reservation.objects.first())
        assert next_line(progress) == f"reservation {reservation.pk}: provisioning, 0/1 nodes up"
        services.release_reservation(reservation_id=reservation.pk, actor="test", reason="an operator ended it")
        stdout = finished(process)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1
    rest = []
    while (line := next_line(progress)) is not None:
        rest.append(line)
    assert re.fullmatch(rf"gpufleet: reservation {reservation.pk} is (releasing|released)", rest[-1])
    assert stdout == ""


def test_reserve_wait_gives_up_after_the_timeout_and_keeps_the_reservation(acme, available_fleet, broker):
    completed = acme.run("reserve", "--nodes", "1", "--wait", "--interval", "0.1", "--timeout", "0.5")
    assert completed.returncode == 1
    reservation = Reservation.objects.get()
    assert completed.stderr.splitlines() == [
        f"reservation {reservation.pk}: provisioning, 0/1 nodes up",
        f"gpufleet: reservation {reservation.pk} is not active after 0.5 s (provisioning, 0/1 nodes up); "
        f"it is kept: `gpufleet release {reservation.pk}` gives it back",
    ]
    assert reservation.state == "provisioning"


def test_quota_shows_the_limits_and_the_use(acme, available_fleet, broker):
    Quota.objects.create(tenant=Tenant.objects.get(name="acme"), nodes=3, nodes_per_pod=6)
    assert acme.run("reserve", "--nodes", "2", "--pod", "p1").returncode == 0
    completed = acme.run("quota")
    assert completed.returncode == 0, completed.stderr
    rows = {row[0]: row[1:] for row in table_rows(completed.stdout)[1:]}
    assert rows["nodes"] == ["3", "2"]
    assert rows["nodes_per_pod"] == ["6", "p1:", "2"]

    over = acme.run("reserve", "--nodes", "2")
    assert over.returncode == 1 and over.stderr.rstrip().endswith("(403)")


def test_python_m_gpufleet_client_is_the_same_command(acme, available_fleet):
    completed = subprocess.run(
        [sys.executable, "-m", "gpufleet_client", "capacity", "--json"],
        env=acme.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert [pod["name"] for pod in json.loads(completed.stdout)["pods"]] == ["p1", "p2"]


def test_main_in_process_returns_the_exit_status(acme, available_fleet, broker):
    reserved = acme.run("reserve", "--nodes", "1", "--pod", "p2", "--json")
    assert reserved.returncode == 0
    created = json.loads(reserved.stdout)
    shown = acme.run("show", str(created["id"]))
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0].split() == ["id", str(created["id"])]
    unknown = acme.run("show", "999999")
    assert unknown.returncode == 3
    assert unknown.stderr == "gpufleet: No Reservation matches the given query. (404)\n"
    assert acme.run("reserve", "--nodes", "0").returncode == 2
