"""The public listener names no tenant, operator, worker or reservation: every route, swept.

The database holds a history in which tenants, an operator and workers have all acted and left
their names in actors and in free text; every answer of every public route (every node, both
kinds of incident and a firmware one, every step of every replay) is searched for every one of those names.
"""

import json
import re
from datetime import timedelta

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import get_resolver

from attestation.models import AttestationResult
from fleet import leases
from fleet.models import AuditEvent, Node
from fleet.services import complete, transition
from remediation import services as remediation
from remediation.models import Remediation
from reservations import services as reservations
from reservations.models import Tenant
from tests.support.factories import (
    bring_up,
    drive,
    enrol_default_fleet,
    make_available,
    signed_result,
    tenant_token,
    xid_under_a_tenant,
)
from tests.support.time_passing import lease_runs_out

PUBLIC = "gpufleet.urls_public"
# Names that no page could show by accident.
TENANTS = ("zyxcorp", "qwvinc")
OPERATOR = "opalice"
FIRST_WORKER, SUCCESSOR = "wkhost7:4242", "wkhostb:777"
RESERVATION_ID = re.compile(r"reservation[\s#\"':=]*\d+", re.IGNORECASE)


def heal(reservation):
    reservations.heal_reservation(reservation_id=reservation.pk)
    reservations.provision_held_nodes()
    bring_up(reservation)


def two_workers_inspect(node: Node) -> None:
    """A worker's lease runs out mid-inspection, a successor takes over and finishes; the first
    worker's late step is discarded, its audit reason naming both."""
    transition(node_id=node.pk, event="inspection_started", actor="system:reconciler")
    (first,) = leases.claim(owner=FIRST_WORKER, node_ids=[node.pk], seconds=2)
    assert leases.set_step(first, step="power_on", actor=f"worker:{FIRST_WORKER}")
    lease_runs_out(node, after=timedelta(seconds=2))  # its lease runs out
    (successor,) = leases.claim(owner=SUCCESSOR, node_ids=[node.pk])
    assert leases.set_step(successor, step="boot_service_image", actor=f"worker:{SUCCESSOR}")
    assert not leases.set_step(first, step="read_evidence", actor=f"worker:{FIRST_WORKER}")
    complete(successor, event="inspection_passed", actor=f"worker:{SUCCESSOR}")
    complete(successor, event="attestation_passed", actor=f"worker:{SUCCESSOR}")


@pytest.fixture
def named_history(transactional_db, settings):
    """Tenants, an operator and workers have all acted, and some wrote their names into reasons."""
    fleet = enrol_default_fleet()
    make_available(fleet[:-1])
    for name in TENANTS:
        tenant_token(name)
    zyxcorp, qwvinc = (Tenant.objects.get(name=name) for name in TENANTS)
    get_user_model().objects.create_user(OPERATOR, password="opalice-password-1", is_staff=True)

    # An XID under zyxcorp, quarantined automatically and replaced.
    xid_under_a_tenant(zyxcorp)
    # One under qwvinc past its own fault budget (the alert reads its node's agent: the tenant's
    # word), which the operator applies by hand.
    budget, settings.TENANT_FAULT_BUDGET = settings.TENANT_FAULT_BUDGET, 0
    suppressed, held, _ = xid_under_a_tenant(qwvinc)
    settings.TENANT_FAULT_BUDGET = budget
    remediation.apply_suppressed(remediation_id=suppressed.pk, operator=f"operator:{OPERATOR}")
    heal(held)

    # qwvinc releases a node with its name in the reason; the re-inspection finds an implant.
    released = reservations.create_reservation(tenant=qwvinc, node_count=1, actor="tenant:qwvinc")
    bring_up(released)
    implanted = Node.objects.get(reservation=released)
    reservations.release_reservation(
        reservation_id=released.pk,
        actor="tenant:qwvinc",
        reason=f"released by tenant qwvinc (reservation {released.pk})",
    )
    drive(implanted, "wipe_succeeded", "inspection_passed")
    signed_result(implanted)
    drive(implanted, "attestation_failed", reason="unknown_component_digest: kernel")

    # zyxcorp flashes its node's BMC and releases it; no reflash repairs it: firmware_drift.
    flashed = reservations.create_reservation(tenant=zyxcorp, node_count=1, actor="tenant:zyxcorp")
    bring_up(flashed)
    tampered = Node.objects.get(reservation=flashed)
    reservations.release_reservation(reservation_id=flashed.pk, actor="tenant:zyxcorp", reason="zyxcorp is done")
    drive(tampered, "wipe_succeeded", "firmware_drift", reason="BMC expected GF-BMC 1.5.0 found GF-BMC 1.5.0-custom")

    # The operator quarantines a node in use, with a note naming its tenant and themself.
    in_use = Node.objects.filter(tenant=zyxcorp, state="active").first()
    assert in_use is not None
    transition(
        node_id=in_use.pk,
        event="operator_quarantine",
        actor=f"operator:{OPERATOR}",
        reason=f"zyxcorp reports GPU 2 flaky (tenant:zyxcorp); {OPERATOR} to check",
    )
    two_workers_inspect(fleet[-1])


def forbidden_names() -> dict[str, str]:
    """Every name of a tenant, a user and a worker the database holds, and what each is."""
    names = {name: "a tenant's name" for name in Tenant.objects.values_list("name", flat=True)}
    names |= {name: "a username" for name in get_user_model().objects.values_list("username", flat=True)}
    for actor in AuditEvent.objects.values_list("actor", flat=True).distinct():
        kind, _, identity = actor.partition(":")
        if kind in ("tenant", "operator", "worker"):
            names[actor] = "an actor"
        if kind == "worker":
            names[identity.rpartition(":")[0]] = "a worker's host"
    names |= {
        owner.partition(":")[0]: "a worker's host" for owner in Node.objects.values_list("lease_owner", flat=True)
    }
    names.pop("", None)
    return names


def routes():
    for entry in get_resolver(PUBLIC).url_patterns:
        yield "/" + str(entry.pattern)


def filled(route: str) -> list[str]:
    """The route with its path parameters filled by every real object: every node, every incident."""
    if "<slug:name>" in route:
        return [route.replace("<slug:name>", name) for name in Node.objects.values_list("name", flat=True)]
    if "<slug:key>" in route:
        keys = [f"remediation-{pk}" for pk in Remediation.objects.values_list("pk", flat=True)]
        keys += [f"attestation-{pk}" for pk in AttestationResult.objects.values_list("pk", flat=True)]
        firmware = AuditEvent.objects.filter(event__in=["firmware_drift", "firmware_checked"])
        keys += [f"firmware-{pk}" for pk in firmware.values_list("pk", flat=True)]
        return [route.replace("<slug:key>", key) for key in keys]
    return [route]


def claims_of(body: str) -> str:
    """The claims of every signed result in an answer: a JWT's base64 would hide a name from a search."""
    tokens = re.findall(r"eyJ[\w-]+\.[\w-]+\.[\w-]+", body)
    return "".join(json.dumps(jwt.decode(token, options={"verify_signature": False})) for token in tokens)


def answers(client):
    """(path, answer, body) of every public route with every real parameter, every replay at every step."""
    for route in routes():
        for path in filled(route):
            answer = client.get(path)
            body = answer.content.decode()
            yield path, answer, body + claims_of(body)
            if path.endswith("/replay") and answer.status_code == 200:
                steps = re.search(r"step 0 of (\d+)", body)
                assert steps is not None, path
                last = int(steps.group(1))
                for step in range(1, last + 1):
                    answer = client.get(f"{path}?step={step}")
                    yield f"{path}?step={step}", answer, answer.content.decode()
    answer = client.get("/", headers={"HX-Request": "true"})
    yield "/ (htmx)", answer, answer.content.decode()


def sweep(client) -> tuple[int, set[str]]:
    """Every public answer through `client`: how many were shown, and every name found in them."""
    names = forbidden_names()
    assert {*TENANTS, OPERATOR} <= set(names)
    leaks, shown = set(), 0
    for path, answer, body in answers(client):
        # Only the attestation of a node never attested is missing.
        assert answer.status_code == 200 or (path.endswith("/attestation") and answer.status_code == 404), path
        shown += answer.status_code == 200
        leaks |= {f"{path} shows {what} {name!r}" for name, what in names.items() if name in body}
        leaks |= {f"{path} shows {found!r}" for found in RESERVATION_ID.findall(body)}
    return shown, leaks


@override_settings(ROOT_URLCONF=PUBLIC)
def test_no_public_answer_names_a_tenant_an_operator_a_worker_or_a_reservation(client, named_history):
    assert {"wkhost7", "wkhostb"} <= set(forbidden_names())
    shown, leaks = sweep(client)
    assert shown > 60
    assert not leaks, "\n".join(sorted(leaks))


@override_settings(ROOT_URLCONF=PUBLIC)
def test_the_public_listener_says_in_use_operator_and_system(client, named_history):
    in_use = Node.objects.filter(state="active").first()
    assert in_use is not None
    assert f"{in_use.name} · active · in use" in client.get("/").content.decode()
    assert "<dt>Tenant</dt><dd>in use</dd>" in client.get(f"/nodes/{in_use.name}").content.decode()
    quarantined = Node.objects.get(
        audit_events__actor=f"operator:{OPERATOR}", audit_events__event="operator_quarantine"
    )
    timeline = client.get(f"/nodes/{quarantined.name}").content.decode()
    assert "<td>operator_quarantine</td><td>active → quarantined</td><td>operator</td>" in timeline
    assert "[tenant] reports GPU 2 flaky ([tenant]); [operator] to check" in timeline
    assert "released by tenant [tenant] ([reservation])" in client.get("/incidents").content.decode()
    worked = client.get("/nodes/node-012").content.decode()
    assert "<td>step_changed</td><td>inspecting → inspecting</td><td>system</td><td>power_on</td>" in worked
    assert "step read_evidence discarded: fencing token" in worked
    assert "(applied by operator)" in client.get("/remediations").content.decode()
    assert "[tenant] reports GPU 2 flaky" in client.get(f"/v1/nodes/{quarantined.name}").json()["quarantine_reason"]


def test_the_private_listener_still_names_everyone_to_an_operator(client, named_history):
    client.force_login(get_user_model().objects.get(username=OPERATOR))
    in_use = Node.objects.filter(state="active").select_related("tenant").first()
    assert in_use is not None and in_use.tenant is not None
    assert f"{in_use.name} · active · tenant {in_use.tenant.name}" in client.get("/").content.decode()
    assert f"<dt>Tenant</dt><dd>{in_use.tenant.name}</dd>" in client.get(f"/nodes/{in_use.name}").content.decode()
    quarantined = Node.objects.get(
        audit_events__actor=f"operator:{OPERATOR}", audit_events__event="operator_quarantine"
    )
    timeline = client.get(f"/nodes/{quarantined.name}").content.decode()
    assert f"<td>operator:{OPERATOR}</td>" in timeline and "zyxcorp reports GPU 2 flaky (tenant:zyxcorp)" in timeline
    assert "released by tenant qwvinc (reservation" in client.get("/incidents").content.decode()
    worked = client.get("/nodes/node-012").content.decode()
    assert f"<td>worker:{FIRST_WORKER}</td>" in worked and f"from {FIRST_WORKER}" in worked
    assert f"(applied by operator:{OPERATOR})" in client.get("/remediations").content.decode()
    assert "zyxcorp reports" in client.get(f"/v1/nodes/{quarantined.name}").json()["quarantine_reason"]
