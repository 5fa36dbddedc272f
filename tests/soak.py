"""The soak: the whole stack under churn, faults and process kills, then the invariants.

Runs its own PostgreSQL, a primary and its synchronous streaming standby (Debian's PostgreSQL,
pg_basebackup -R: tests/support/postgres_cluster.py), its database (gpufleet_soak) migrated there;
its own Redis, a master and its replica under three Sentinels (tests/support/redis_sentinel.py);
bmcsim (50 nodes, SIM_TIME_SCALE=0), gunicorn, two workers, two beats (one leads, by PostgreSQL's
advisory lock; the other stands by), and Prometheus with Alertmanager from Debian's packages, each
on a port of its own that a restart keeps. For DURATION seconds, tenants reserve (rack-scale among
them, some for later) and release through the API; faults strike through bmcsim's fault API (XID 79,
BMC 500s and timeouts, hung erases, implants), and on the tenants' fabrics (a manager down, refusing
changes or slow for a few seconds; an active node's port moved by hand, sometimes into another live
reservation's segment, which the fabric sync must put back); an operator clears the faults of
quarantined nodes and returns them, and XID 79 strikes a returned node again once it is back in
service within the cap's window (a new incident, which the blast-radius cap counts again); and a
driver kills, every kind once in a random order and then at random, at least every 40 s: a worker
(SIGKILL), the web server or bmcsim, each restarted; the leading beat, restarted once the other
leads; the PostgreSQL primary (SIGKILL, with a tenant's creates racing its death), its standby
promoted and the old primary rebuilt as the new standby; the Redis master, which the Sentinels fail
over, restarted as the new master's replica; or it stalls a worker with SIGSTOP past its lease
before it resumes. After each kill a probe reservation measures the time until the system
provisions a node again. Beside them a hostile tenant misbehaves throughout: ten webhooks whose
receivers drip their answers a byte every 2 s, and a flood of faults its own nodes say of themselves
(XIDs its agents report, reports of a broken node through the API). The honest tenants' reservations
are timed from request to active, and the node workers' logs must show no webhook delivery: those
have a pool of their own. At the end the fleet settles and `check_invariants` runs.

Prints a table: operations, faults (the fabrics' apart), nodes struck again, drift put back,
kills, violations (must be 0), reservations lost (every create the API acknowledged, 201, must be
in the database at the end, settled), recovery time per kill (beside issue #36's targets for the
failovers and the beat). Exit status 1 on any violation or lost reservation, its database dumped
beside the logs.
Run: make soak DURATION=600   or   .venv/bin/python -m tests.soak --duration 60
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import requests

from tests.support.ports import free_port
from tests.support.postgres_cluster import multi_host_url
from tests.support.redis_sentinel import MASTER_NAME, sentinel_url

SOAK_DB = "gpufleet_soak"
# PostgreSQL's two servers and the three Sentinels listen on ports picked now: this process is a
# control-plane process too (the operator's returns enqueue work on commit), and Django reads its
# URLs once, at setup, before they start. Its processes inherit the fabric sync's period, short so
# that drift is read back and put back many times a run, and check_invariants here judges the
# tenant networks by the same period.
POSTGRES_PORTS = (free_port(), free_port())
SENTINEL_PORTS = [free_port() for _ in range(3)]
os.environ.update(
    DATABASE_URL=multi_host_url(POSTGRES_PORTS, SOAK_DB),
    REDIS_URL=sentinel_url(SENTINEL_PORTS),
    GPUFLEET_REDIS_SENTINEL_MASTER=MASTER_NAME,
    DJANGO_SETTINGS_MODULE="gpufleet.settings",
    GPUFLEET_FABRIC_SYNC_SECONDS="10",
)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Q  # noqa: E402
from django.db.models.functions import Now  # noqa: E402

from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK  # noqa: E402
from fleet import lifecycle  # noqa: E402
from fleet.models import AuditEvent, AuditOnlyEvent, NetworkAttachment, Node, TenantNetwork  # noqa: E402
from fleet.services import transition  # noqa: E402
from remediation.models import Remediation  # noqa: E402
from reservations.models import Reservation, ReservationState, WebhookEvent  # noqa: E402
from tests.support.api import member_key  # noqa: E402
from tests.support.bmcsim import Bmcsim, start_bmcsim  # noqa: E402
from tests.support.factories import tenant_token  # noqa: E402
from tests.support.hostile_servers import Dripping, running  # noqa: E402
from tests.support.postgres_cluster import PostgresCluster  # noqa: E402
from tests.support.processes import CELERY_WORKER, Process, wait_for  # noqa: E402
from tests.support.redis_sentinel import SentinelCluster  # noqa: E402
from tests.support.stack import ControlPlane, Monitoring  # noqa: E402
from tests.support.table import print_table  # noqa: E402

NODES = 50
TENANTS = ["soak-a", "soak-b", "soak-c"]
HOSTILE = "soak-hostile"
DRIPPING_WEBHOOKS = 10
NODE_WORKERS = ["w1", "w2"]
BEATS = ["beat-a", "beat-b"]
# A lone Redis restarted in place is no kill of this stack: a master comes back as a replica,
# never empty as the master (its replica would sync the emptiness), so Redis's kill is its failover.
KILLS = ["worker", "beat", "web", "bmcsim", "postgres-failover", "redis-failover", "stall"]
# Issue #36's targets for the recovery from these kills, in seconds: the table shows them beside the times.
RECOVERY_TARGETS = {"postgres-failover": 15, "redis-failover": 10, "beat": 10}
# What a beat's log says of its leadership, each time it changes (gpufleet/beat_leadership.py).
LEADERSHIP = re.compile(r"beat: (leading|standing by|stopped)")
TRANSITIONAL = [lifecycle.State.INSPECTING, lifecycle.State.WIPING, lifecycle.State.PROVISIONING]
# What a reservation the API accepted may be once the fleet has settled; anything else is lost.
SETTLED = {ReservationState.ACTIVE, ReservationState.RELEASED, ReservationState.PENDING, ReservationState.FAILED}
LIVE = [ReservationState.PENDING, ReservationState.PROVISIONING, ReservationState.ACTIVE, ReservationState.DEGRADED]
LEASE_SECONDS = 3
NODE_FAULTS = ["xid", "bmc_error", "bmc_timeout", "erase_hang", "implant"]
# A fabric's manager down, refusing every change, or slow: each stands for a few seconds.
STANDING_FABRIC_FAULTS = ["fabric_api_down", "fabric_apply_fails", "fabric_slow"]
FABRIC_DRIFT = "fabric_drift"
FAULT_KINDS = [*NODE_FAULTS, *STANDING_FABRIC_FAULTS, FABRIC_DRIFT]


def prepare_database(postgres: PostgresCluster) -> None:
    """The soak's database on its own primary, migrated there (the standby streams it): a copy of
    one migrated elsewhere, as the e2e failover test takes, would cost that migration first."""
    postgres.create_database(SOAK_DB)
    call_command("migrate", verbosity=0)


def start_beat(name: str, env: dict, log_dir: Path) -> Process:
    """A beat as the Procfile runs it (the scheduler, and the reconcile queue's worker), with a node
    name and a schedule of its own; its log at INFO, where it says when it leads and stands by."""
    options = ["--beat", "--queues", "reconcile", "--pool", "solo", "-n", f"{name}@soak", "--loglevel", "INFO"]
    args = [*CELERY_WORKER, *options, "--schedule", str(log_dir / f"{name}-schedule")]
    return Process(name, args, {**env, "GPUFLEET_LOG_LEVEL": "INFO"}, log_dir)


class Stack:
    """Every process of the control plane, each restartable on the port it started on: the e2e
    tests' ControlPlane for web, workers and the two beats, with bmcsim beside it, on a PostgreSQL
    primary with its synchronous standby and a Redis master with its replica under Sentinels."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.postgres = PostgresCluster(ports=POSTGRES_PORTS)
        try:
            self.sentinels = SentinelCluster(scratch, SENTINEL_PORTS)
        except BaseException:
            self.postgres.stop()
            raise
        self.bmcsim_port, self.web_port = free_port(), free_port()
        self.bmcsim_url = f"http://127.0.0.1:{self.bmcsim_port}"
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.plane = ControlPlane(
            scratch,
            self.bmcsim_url,
            self.sentinels,
            web_port=self.web_port,
            DATABASE_URL=os.environ["DATABASE_URL"],  # both servers' (process_env's names one host)
            SIM_TIME_SCALE="0",
            GPUFLEET_LEASE_SECONDS=str(LEASE_SECONDS),
            GPUFLEET_WIPE_TIMEOUT="10",
            GPUFLEET_LOG_LEVEL="WARNING",
            GPUFLEET_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",  # the hostile tenant's receivers
            GPUFLEET_OUTBOUND_DEADLINE_SECONDS="3",
        )
        self.bmcsim: Bmcsim | None = None

    def start(self, name: str) -> None:
        if name == "bmcsim":
            self.bmcsim = start_bmcsim(self.scratch / "bmcsim", nodes=NODES, port=self.bmcsim_port, timeout=30)
        elif name == "web":
            self.plane.start_web(port=self.web_port)
        elif name in BEATS:
            self.plane.workers[name] = start_beat(name, self.plane.env, self.scratch)
        elif name == "hooks":
            self.plane.start_worker(name, queues="webhooks")
        else:
            self.plane.start_worker(name, queues="celery")

    def process(self, name: str) -> Process:
        assert self.bmcsim is not None, "bmcsim runs throughout the soak"
        return self.bmcsim.process if name == "bmcsim" else self.plane.workers[name]

    def kill(self, name: str) -> None:
        self.process(name).kill()

    def leads(self, beat: str) -> bool:
        """Whether the beat's latest word on its leadership is that it leads: that it holds the
        advisory lock, if it still runs and has ticked since it started."""
        return LEADERSHIP.findall(self.process(beat).output())[-1:] == ["leading"]

    def kill_leading_beat(self) -> None:
        """SIGKILL the beat that leads; once the other leads, start it again, to stand by."""
        # Two say so for a while after a restart: the restarted one's log ends with its earlier
        # life's word until its first tick.
        wait_for("one beat to lead", lambda: sum(map(self.leads, BEATS)) == 1, timeout=60)
        (leader,) = filter(self.leads, BEATS)
        (standby,) = set(BEATS) - {leader}
        self.kill(leader)
        wait_for("the standing-by beat to lead", lambda: self.leads(standby), timeout=60)
        self.start(leader)

    def dump_database(self, path: Path) -> None:
        """The soak's database into `path`, for whoever looks into a failure: its servers go with the run."""
        dumped = subprocess.run(
            ["pg_dump", "-f", str(path), os.environ["DATABASE_URL"]], capture_output=True, text=True
        )
        print(f"soak: its database dumped to {path}" if dumped.returncode == 0 else dumped.stderr, file=sys.stderr)

    def stop(self) -> None:
        self.plane.stop()
        if self.bmcsim is not None:
            self.bmcsim.stop()
        self.sentinels.stop()
        self.postgres.stop()


def tenants_keys() -> dict[str, dict[str, str]]:
    """Each honest tenant's keys: its organisation key, a member's read-write key and an admin's
    read key; the hostile tenant's organisation key."""
    keys = {
        name: {
            "organisation": tenant_token(name),
            "member": member_key(name, f"{name}-member", "member"),
            "read": member_key(name, f"{name}-admin", "admin", scope="read"),
        }
        for name in TENANTS
    }
    return keys | {HOSTILE: {"organisation": tenant_token(HOSTILE)}}


class Soak:
    def __init__(self, stack: Stack, keys: dict[str, dict[str, str]], seed: int):
        self.stack = stack
        self.rng = random.Random(seed)
        self.sessions: dict[str, dict[str, requests.Session]] = {}
        for name, kinds in keys.items():
            self.sessions[name] = {}
            for kind, key in kinds.items():
                session = requests.Session()
                session.headers["Authorization"] = f"Bearer {key}"
                self.sessions[name][kind] = session
        self.accepted: set[int] = set()
        self.operations: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.kills: list[tuple[str, float | None]] = []
        self.returned: dict[str, float] = {}  # the nodes the operator returned, and when
        self.struck_again: list[str] = []
        self.fabric_faults: Counter[str] = Counter()  # "kind on fabric"
        self.drifted: dict[tuple[str, str], datetime] = {}  # (node, fabric) moved by hand, and when last
        self.drifts_into_other_tenants = 0
        self.kinds_not_yet_struck = self.rng.sample(FAULT_KINDS, len(FAULT_KINDS))
        self.next_fault = time.monotonic()
        self.probing: int | None = None  # the reservation a kill's probe waits on
        # Faults to clear once due: (when, the DELETE's filter: {"node": ...} or {"fabric": ...}).
        self.transient: list[tuple[float, dict[str, str]]] = []
        self.asked_at: dict[int, float] = {}  # honest reservations for now not yet active, and when asked
        self.to_active: list[float] = []  # seconds from request to active of the honest ones
        self.acknowledged_as_primary_died = 0  # creates that raced a PostgreSQL primary's death, acknowledged

    # -- tenants -------------------------------------------------------------------------------

    def api(self, tenant: str, method: str, path: str, key: str | None = None, **kwargs) -> requests.Response | None:
        """A call with one of the tenant's keys: `key`, or any that may make it (a read with any)."""
        sessions = self.sessions[tenant]
        if key is None:
            key = self.rng.choice([kind for kind in sessions if method == "GET" or kind != "read"])
        self.operations[f"calls with the {key} key"] += 1
        try:
            return sessions[key].request(method, f"{self.stack.web_url}{path}", timeout=10, **kwargs)
        except requests.RequestException:
            self.operations["API calls that found the web server down"] += 1
            return None

    def reserve(self, tenant: str, body: dict) -> int | None:
        answer = self.api(tenant, "POST", "/v1/reservations", json=body)
        if answer is None:
            return None
        if answer.status_code >= 500:
            raise SystemExit(f"the API answered {answer.status_code} to {body}: {answer.text[:300]}")
        if answer.status_code == 201:
            self.accepted.add(answer.json()["id"])
            self.operations["reservations accepted"] += 1
            if tenant != HOSTILE and "starts_at" not in body:
                self.asked_at[answer.json()["id"]] = time.monotonic()
            return answer.json()["id"]
        self.operations[f"reservations refused ({answer.status_code})"] += 1
        return None

    def churn_tenant(self) -> None:
        """One tenant's move: release one of its reservations, the likelier the fuller the fleet
        (so the fleet stays about half held), or reserve."""
        tenant = self.rng.choice(TENANTS)
        held = Node.objects.filter(state__in=lifecycle.SERVING_STATES).count() / NODES
        if self.rng.random() < held and self.release_one(tenant):
            return
        rack_scale = self.rng.random() < 0.1
        body: dict[str, object] = {"node_count": 8 if rack_scale else self.rng.randint(1, 4), "rack_scale": rack_scale}
        if self.rng.random() < 0.2:  # an advance reservation, due within the run
            starts = datetime.now(UTC) + timedelta(seconds=self.rng.randint(5, 30))
            body.update(starts_at=starts.isoformat(), ends_at=(starts + timedelta(minutes=10)).isoformat())
        # The read key tries a write, first thing and then now and then: refused, whatever its maker's role.
        if not self.operations["writes refused to a read key (403)"] or self.rng.random() < 0.05:
            refused = self.api(tenant, "POST", "/v1/reservations", key="read", json=body)
            if refused is not None and refused.status_code != 403:
                raise SystemExit(f"a read key's reservation was answered {refused.status_code}: {refused.text[:300]}")
            self.operations["writes refused to a read key (403)"] += 1
            return
        self.reserve(tenant, body)

    def note_active(self) -> None:
        """Time the honest reservations that went active since the last look."""
        active = Reservation.objects.filter(pk__in=self.asked_at, state=ReservationState.ACTIVE)
        for pk in active.values_list("pk", flat=True):
            self.to_active.append(time.monotonic() - self.asked_at.pop(pk))

    # -- the hostile tenant --------------------------------------------------------------------

    def register_dripping_webhooks(self, receivers: list[Dripping]) -> None:
        for receiver in receivers:
            body = {"url": f"{receiver.url}/hooks", "events": list(WebhookEvent.values)}
            made = self.api(HOSTILE, "POST", "/v1/webhooks", json=body)
            if made is None or made.status_code != 201:
                raise SystemExit(f"the hostile tenant's webhook was refused: {made and made.text[:300]}")

    def misbehave(self) -> None:
        """The hostile tenant's move: hold a node or two (its reservations' events go to its dripping
        receivers), and have its own nodes say they are broken, through their agents and the API."""
        held = list(
            Node.objects.filter(reservation__tenant__name=HOSTILE, state="active").values_list("name", "reservation_id")
        )
        # Its reservations still provisioning count: counting its active nodes alone, it asked for
        # another every move while the fleet was slow, and soon held a third of it.
        live = Reservation.objects.filter(tenant__name=HOSTILE, state__in=LIVE).count()
        if live < 2 or self.rng.random() < 0.2:
            self.reserve(HOSTILE, {"node_count": 1})
        if not held:
            return
        node, reservation = self.rng.choice(held)
        if self.rng.random() < 0.5:
            if self.fault({"node": node, "kind": "xid", "gpu": self.rng.randrange(8), "xid": 79}):
                self.operations["hostile: XIDs its own agents reported"] += 1
            return
        answer = self.api(
            HOSTILE, "POST", f"/v1/reservations/{reservation}/nodes/{node}/report", json={"description": "broken?"}
        )
        if answer is not None:
            self.operations[f"hostile: reports of its own nodes ({answer.status_code})"] += 1

    def release_one(self, tenant: str) -> bool:
        live = list(
            Reservation.objects.filter(
                tenant__name=tenant,
                state__in=[ReservationState.ACTIVE, ReservationState.PENDING, ReservationState.DEGRADED],
            )
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not live:
            return False
        answer = self.api(tenant, "POST", f"/v1/reservations/{self.rng.choice(live)}/release")
        if answer is not None and answer.status_code >= 500:
            raise SystemExit(f"the API answered {answer.status_code} to a release: {answer.text[:300]}")
        self.operations["releases"] += answer is not None and answer.status_code == 200
        return True

    # -- faults and the operator ---------------------------------------------------------------

    def fault(self, body: dict) -> bool:
        try:
            answer = requests.post(f"{self.stack.bmcsim_url}/bmcsim/v1/faults", json=body, timeout=5)
        except requests.RequestException:
            self.operations["faults that found bmcsim down"] += 1
            return False
        if not answer.ok:
            self.operations[f"faults bmcsim refused ({answer.status_code})"] += 1
            return False
        if "fabric" in body:
            self.fabric_faults[f"{body['kind']} on {body['fabric']}"] += 1
        else:
            self.faults[body["kind"]] += 1
        return True

    def clear_faults(self, **where: str) -> bool:
        """Clear the faults `where` says (node= or fabric=; nothing: all of them); False if bmcsim is down."""
        try:
            requests.delete(f"{self.stack.bmcsim_url}/bmcsim/v1/faults", params=where, timeout=5).raise_for_status()
        except requests.RequestException:
            return False
        return True

    def inject_fault(self) -> None:
        if again := self.returned_in_service():
            if self.fault({"node": again, "kind": "xid", "gpu": self.rng.randrange(8), "xid": 79}):
                del self.returned[again]
                self.struck_again.append(again)
            return
        # The first fault an XID, so that even a minute's run returns a node in time to strike it again;
        # then every kind once, in a random order, so that a minute's run has each; then at random.
        first_of_its_kind = bool(self.faults and self.kinds_not_yet_struck)
        if not self.faults:
            kind = "xid"
        elif first_of_its_kind:
            kind = self.kinds_not_yet_struck.pop()
        else:
            kind = self.rng.choice(FAULT_KINDS)
        if not self.strike(kind) and first_of_its_kind:
            # No node to strike, or bmcsim down: it strikes later, after the kinds still waiting (at
            # the end it would be popped again at once and hold every other kind back).
            self.kinds_not_yet_struck.insert(0, kind)

    def strike(self, kind: str) -> bool:
        """Inject one fault of `kind`; False where none was (no active node for it, or bmcsim down)."""
        if kind in STANDING_FABRIC_FAULTS:
            fabric = self.rng.choice(FABRICS)
            if not self.fault({"fabric": fabric, "kind": kind}):
                return False
            self.transient.append((time.monotonic() + self.rng.uniform(2, 6), {"fabric": fabric}))
            return True
        active = list(Node.objects.filter(self.not_probed(), state="active").values_list("name", flat=True))
        if kind in ("xid", "implant", "erase_hang", FABRIC_DRIFT) and not active:
            return False
        if kind == FABRIC_DRIFT:
            return self.drift(self.rng.choice(active))
        anyone = list(Node.objects.values_list("name", flat=True))
        node = self.rng.choice(active if kind in ("xid", "implant", "erase_hang") else anyone)
        xid = {"gpu": self.rng.randrange(8), "xid": 79} if kind == "xid" else {}
        if not self.fault({"node": node, "kind": kind, **xid}):
            return False
        if kind in ("bmc_error", "bmc_timeout"):
            self.transient.append((time.monotonic() + self.rng.uniform(2, 6), {"node": node}))
        return True

    def drift(self, name: str) -> bool:
        """Someone moves the node's port(s) on a fabric by hand: half the time into the segment of
        another live reservation within the node's reach on that fabric (its pod's InfiniBand fabric,
        its rack's NVLink domain), else where bmcsim picks."""
        node = Node.objects.select_related("rack__pod").get(name=name)
        fabric = self.rng.choice(FABRICS)
        scope = {ETHERNET: "", INFINIBAND: node.rack.pod.name, NVLINK: node.rack.name}[fabric]
        live = TenantNetwork.objects.filter(released_at__isnull=True, fabric=fabric, scope=scope)
        others = [network for network in live if network.reservation_id != node.reservation_id]
        body = {"kind": FABRIC_DRIFT, "fabric": fabric, "node": name}
        if others and self.rng.random() < 0.5:
            body["segment"] = self.rng.choice(others).value
        if not self.fault(body):
            return False
        self.drifted[name, fabric] = datetime.now(UTC)
        self.drifts_into_other_tenants += "segment" in body
        return True

    def returned_in_service(self) -> str | None:
        """A node the operator returned within the cap's window, back in service and not struck
        again since: its next fault is a new incident."""
        window = settings.REMEDIATION_WINDOW_SECONDS
        self.returned = {name: at for name, at in self.returned.items() if time.monotonic() - at < window}
        serving = Node.objects.filter(self.not_probed(), name__in=self.returned, state__in=["available", "active"])
        return serving.order_by("name").values_list("name", flat=True).first()

    def operator(self) -> None:
        """Clear what struck quarantined nodes and return them, as an operator does after a repair;
        and clear transient BMC and fabric faults whose time has come."""
        now = time.monotonic()
        for due, where in [t for t in self.transient if t[0] <= now]:
            if self.clear_faults(**where):  # else bmcsim is down: again at the next look
                self.transient.remove((due, where))
        for node_id, name in Node.objects.filter(state="quarantined").values_list("pk", "name"):
            self.clear_faults(node=name)
            try:
                transition(node_id=node_id, event=lifecycle.Event.OPERATOR_RETURN, actor="operator:soak")
                self.operations["quarantined nodes repaired and returned"] += 1
                self.returned[name] = time.monotonic()
            except lifecycle.TransitionRefused:
                pass

    # -- kills ---------------------------------------------------------------------------------

    def kill(self, what: str) -> None:
        killed_at = time.monotonic()
        postgres, sentinels = self.stack.postgres, self.stack.sentinels
        raced: list[int] = []  # reservations for later acknowledged as the PostgreSQL primary died
        if what == "stall":
            worker = self.stack.process(self.rng.choice(["w1", "w2"]))
            worker.signal(signal.SIGSTOP)
            time.sleep(2 * LEASE_SECONDS)  # past its lease: a successor takes its node over
            worker.signal(signal.SIGCONT)
        elif what == "postgres-failover":
            with self.creating_for_later(TENANTS[1], raced):
                time.sleep(1)  # creates acknowledged right up to the primary's death
                killed_at = time.monotonic()
                postgres.kill_primary()
                time.sleep(1)  # a second with no primary
            postgres.promote_standby()
            postgres.rebuild_standby()  # until then, the new primary's commits wait for a standby
            connection.close()  # this process's died with the old primary: the next finds the new one
        elif what == "redis-failover":
            lost_master = sentinels.kill_master()
            sentinels.wait_for_new_master(lost_master, timeout=60)
        elif what == "beat":
            self.stack.kill_leading_beat()
        else:
            name = self.rng.choice(["w1", "w2"]) if what == "worker" else what
            self.stack.kill(name)
            time.sleep(1)
            self.stack.start(name)
        self.kills.append((what, self.probe(killed_at)))
        # What a kill left to do once the recovery is timed: the Sentinels' wait for the lost master
        # back as a replica is no outage, and the reservations that raced the primary's death are done.
        if what == "redis-failover":
            sentinels.restart_as_replica(lost_master)
        for reservation in raced:
            answer = self.api(TENANTS[1], "POST", f"/v1/reservations/{reservation}/release", key="organisation")
            if answer is not None and answer.status_code >= 500:
                raise SystemExit(f"the API answered {answer.status_code} to a release: {answer.text[:300]}")

    @contextlib.contextmanager
    def creating_for_later(self, tenant: str, acknowledged: list[int]) -> Iterator[None]:
        """Throughout the block, the tenant creates reservations for an hour from now, one after
        another, in a thread of its own; each the API acknowledged goes into `acknowledged` and counts
        as accepted (the soak's end looks for it). Other answers: a refusal, or the 503 of a database
        out of reach."""
        session = requests.Session()
        session.headers.update(self.sessions[tenant]["organisation"].headers)
        done = threading.Event()
        unexpected: list[str] = []

        def create() -> None:
            while not done.is_set():
                starts = datetime.now(UTC) + timedelta(hours=1)
                period = {"starts_at": starts.isoformat(), "ends_at": (starts + timedelta(minutes=10)).isoformat()}
                try:
                    answer = session.post(
                        f"{self.stack.web_url}/v1/reservations", json={"node_count": 1, **period}, timeout=10
                    )
                except requests.RequestException as error:
                    unexpected.append(f"with no answer ({error})")
                    return
                if answer.status_code == 201:
                    acknowledged.append(answer.json()["id"])
                elif answer.status_code >= 500 and answer.status_code != 503:
                    unexpected.append(f"{answer.status_code}: {answer.text[:300]}")
                    return

        creator = threading.Thread(target=create)
        creator.start()
        try:
            yield
        finally:
            done.set()
            creator.join()
        self.accepted.update(acknowledged)
        self.operations["reservations accepted"] += len(acknowledged)
        self.acknowledged_as_primary_died += len(acknowledged)
        if unexpected:
            raise SystemExit(f"a create that raced the PostgreSQL primary's death was answered {unexpected[0]}")

    def probe(self, since: float, timeout: float = 120) -> float | None:
        """Seconds from `since` until a one-node reservation made now is active; None if never."""
        deadline = time.monotonic() + timeout
        reservation = None
        while time.monotonic() < deadline:
            if reservation is None:
                reservation = self.probing = self.reserve(TENANTS[0], {"node_count": 1})
                if reservation is None:  # no free node, or the web server still down: make room
                    self.release_one(self.rng.choice(TENANTS))
            elif Reservation.objects.get(pk=reservation).state == ReservationState.ACTIVE:
                recovered = time.monotonic() - since
                self.api(TENANTS[0], "POST", f"/v1/reservations/{reservation}/release")
                self.probing = None
                return recovered
            self.strike_when_due()
            self.operator()
            time.sleep(0.2)
        self.probing = None
        return None

    def not_probed(self) -> Q:
        """Nodes other than the probe's: a kill's recovery is timed on a node that no fault strikes."""
        return ~Q(reservation_id=self.probing) if self.probing is not None else Q()

    def strike_when_due(self) -> None:
        """Faults strike on a clock of their own, kills and their probes included (on a slow machine the
        probes take most of a short run): every 1 to 3 s until each kind has struck once, so that a
        minute's run has them all, then every 2 to 8 s."""
        if time.monotonic() >= self.next_fault:
            self.inject_fault()
            self.next_fault = time.monotonic() + self.rng.uniform(*(1, 3) if self.kinds_not_yet_struck else (2, 8))

    # -- the run -------------------------------------------------------------------------------

    def run(self, duration: float) -> None:
        started = time.monotonic()
        # Every kind at least once, in a random order, then at random; at least every 40 s.
        kill_every = min(duration / (len(KILLS) + 1), 40)
        schedule = self.rng.sample(KILLS, len(KILLS))
        self.next_fault = started + 2

        # Until the time is up, every kind of kill has run and every kind of fault has struck (within
        # three times the duration: a fleet that never has an active node should not hang the run).
        def owed() -> bool:
            return len(self.kills) < len(KILLS) or (
                bool(self.kinds_not_yet_struck) and time.monotonic() - started < 3 * duration
            )

        while time.monotonic() - started < duration or owed():
            self.churn_tenant()
            self.misbehave()
            self.note_active()
            self.strike_when_due()
            self.operator()
            if time.monotonic() >= started + (len(self.kills) + 1) * kill_every:
                self.kill(schedule[len(self.kills)] if len(self.kills) < len(KILLS) else self.rng.choice(KILLS))
            time.sleep(self.rng.uniform(0.1, 0.5))

    def settle(self, timeout: float) -> float:
        """Clear every fault, return every quarantined node and wait until nothing owes work, no
        advance reservation is about to start, and every port moved by hand has been read back
        since and found where it should be, twice in a row a second apart."""
        started = time.monotonic()
        wait_for("bmcsim to clear every fault", self.clear_faults, timeout=60, interval=1)
        self.transient.clear()
        self.returned.clear()
        calm = []

        def settled() -> bool:
            self.operator()
            calm.append(not self.unsettled())
            return calm[-2:] == [True, True]

        try:
            wait_for("the fleet to settle", settled, timeout=timeout, interval=1)
        except AssertionError as timed_out:  # say what is left, for whoever reads the kept logs
            raise SystemExit(f"{timed_out}: {'; '.join(self.unsettled())}") from None
        return time.monotonic() - started

    def unsettled(self) -> list[str]:
        """What still owes work: nodes in a workflow or quarantined, reservations on their way or about
        to start, and ports moved by hand not read back since (a second on: a sync that read a port
        before the move may record it just after)."""
        busy = Node.objects.filter(state__in=[*TRANSITIONAL, lifecycle.State.QUARANTINED]).order_by("name")
        owing = Reservation.objects.filter(
            state__in=[ReservationState.PROVISIONING, ReservationState.RELEASING, ReservationState.DEGRADED]
        ).order_by("pk")
        due = Reservation.objects.filter(
            state=ReservationState.PENDING, starts_at__lte=Now() + timedelta(seconds=5)
        ).order_by("pk")
        unread = [
            f"{name}'s {fabric} ports not read back since moved by hand"
            for (name, fabric), at in self.drifted.items()
            if not NetworkAttachment.objects.filter(
                node__name=name, fabric=fabric, confirmed=True, checked_at__gt=at + timedelta(seconds=1)
            ).exists()
        ]
        return [
            *(
                f"{name} {state} at {step or 'no step'}"
                for name, state, step in busy.values_list("name", "state", "step")
            ),
            *(
                f"reservation {pk} {state} {reason}".strip()
                for pk, state, reason in owing.values_list("pk", "state", "reason")
            ),
            *(f"reservation {pk} due at {starts:%H:%M:%S}" for pk, starts in due.values_list("pk", "starts_at")),
            *unread,
        ]

    def lost(self) -> list[str]:
        found = dict(Reservation.objects.filter(pk__in=self.accepted).values_list("pk", "state"))
        lost = [f"reservation {pk} is missing" for pk in sorted(self.accepted - set(found))]
        lost += [f"reservation {pk} ended {state}" for pk, state in sorted(found.items()) if state not in SETTLED]
        return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of churn")
    parser.add_argument("--settle-timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="gpufleet-soak-"))
    print(f"soak: logs in {scratch}", file=sys.stderr)
    stack = Stack(scratch)
    passed = False
    try:
        prepare_database(stack.postgres)
        stack.start("bmcsim")
        call_command("seed_fleet", "--bmcsim-url", stack.bmcsim_url, stdout=StringIO())
        stack.plane.configure_attestation()
        keys = tenants_keys()
        for name in ("web", *NODE_WORKERS, "hooks", *BEATS):
            stack.start(name)
        stack.plane.monitoring = Monitoring(scratch, stack.web_url)
        wait_for("the fleet inspected", lambda: Node.objects.filter(state="available").count() >= NODES - 2, 180, 1)

        soak = Soak(stack, keys, args.seed)
        with contextlib.ExitStack() as receivers:
            dripping = [
                receivers.enter_context(running(Dripping(interval=2.0, give_up_after=30)))
                for _ in range(DRIPPING_WEBHOOKS)
            ]
            soak.register_dripping_webhooks(dripping)
            print(f"soak: {args.duration:g} s of churn, faults, kills and a hostile tenant ...", file=sys.stderr)
            soak.run(args.duration)
            dripped_to = sum(receiver.connections for receiver in dripping)
        print("soak: settling ...", file=sys.stderr)
        settle_seconds = soak.settle(args.settle_timeout)
        connection.close()
        report = StringIO()
        try:
            call_command("check_invariants", stdout=report)
            violations = 0
        except CommandError as failed:
            violations = int(str(failed).split()[0])
        lost = soak.lost()
        quarantines = Counter(
            AuditEvent.objects.filter(to_state="quarantined")
            .exclude(from_state="quarantined")  # transitions into quarantine, not rows about a quarantined node
            .values_list("event", flat=True)
            .order_by()
        )
        discarded = AuditEvent.objects.filter(event="result_discarded").count()
        drift_repaired = Counter(
            AuditEvent.objects.filter(event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED)
            .values_list("detail__fabric", flat=True)
            .order_by()
        )
        incidents = Remediation.objects.filter(counted_from__isnull=False).count()
        suppressed = Remediation.objects.filter(status="suppressed").count()
        over_budget = Remediation.objects.filter(status="suppressed", reason__contains="tenant_fault_budget").count()
        # Webhook deliveries run in the hooks pool alone: a node worker that ran one could be held by it.
        deliveries_on_node_workers = sum(
            stack.plane.workers[name].output().count("workflows.tasks.deliver_webhooks[") for name in NODE_WORKERS
        )
        passed = not (violations or lost or deliveries_on_node_workers or any(s is None for _, s in soak.kills))
    finally:
        connection.close()
        if not passed:
            stack.dump_database(scratch / f"{SOAK_DB}.sql")
        stack.stop()

    rows = [
        ("duration of churn, s", f"{args.duration:g}"),
        *((f"operations: {name}", count) for name, count in sorted(soak.operations.items())),
        ("faults injected", ", ".join(f"{kind} {n}" for kind, n in sorted(soak.faults.items())) or "none"),
        *((f"fabric faults: {kind}", n) for kind, n in sorted(soak.fabric_faults.items())),
        ("  drifts into another live reservation's segment", soak.drifts_into_other_tenants),
        (
            "drift put back (audited fabric_drift_repaired)",
            ", ".join(f"{fabric} {n}" for fabric, n in sorted(drift_repaired.items())) or "none",
        ),
        ("nodes struck again after their return", len(soak.struck_again)),
        ("quarantines by cause", ", ".join(f"{event} {n}" for event, n in sorted(quarantines.items())) or "none"),
        ("automatic remediations let act by the cap (incidents)", incidents),
        ("alerts suppressed (the cap, or a tenant's own budget)", suppressed),
        ("  of them self-reported past the tenant's budget", over_budget),
        ("hostile: connections to its dripping receivers", dripped_to),
        ("webhook deliveries run by node workers", f"{deliveries_on_node_workers}  (must be 0)"),
        (
            "honest reservations, s from request to active: p50 / max",
            f"{statistics.median(soak.to_active):.1f} / {max(soak.to_active):.1f}" if soak.to_active else "none",
        ),
        ("late results discarded by fencing", discarded),
        ("kills and stalls", len(soak.kills)),
        *((f"  {what}: recovered (probe reservation active) after, s", recovery(what, s)) for what, s in soak.kills),
        ("reservations acknowledged as a PostgreSQL primary died", soak.acknowledged_as_primary_died),
        ("time to settle at the end, s", f"{settle_seconds:.1f}"),
        ("invariant violations", f"{violations}  (must be 0)"),
        ("reservations lost", f"{len(lost)}  (must be 0)"),
    ]
    print_table(rows)
    if not passed:
        print(report.getvalue(), *lost, sep="\n", file=sys.stderr)
        raise SystemExit(f"soak failed: its database dump and logs in {scratch} are kept")


def recovery(what: str, seconds: float | None) -> str:
    """A kill's recovery time as the table shows it, beside its target where issue #36 set one."""
    if seconds is None:
        return "never"
    target = RECOVERY_TARGETS.get(what)
    return f"{seconds:.1f}" + (f"  (target: under {target})" if target else "")


if __name__ == "__main__":
    main()
