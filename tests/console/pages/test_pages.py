"""The server-rendered pages through Django's test client, on the real PostgreSQL."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from attestation.models import AttestationResult
from console.pages import selectors
from console.pages.disclosure import Disclosure
from console.pages.selectors import floor
from fleet import firmware, leases, services
from fleet.models import AuditEvent, Node
from fleet.workflow_steps import StepName
from reservations import services as reservations
from reservations.models import Tenant
from tests.support.factories import (
    alert,
    bring_up,
    drive,
    enrol_default_fleet,
    failed_attestation_after_a_tenant,
    make_available,
    payload,
    signed_result,
    xid_under_a_tenant,
)

PUBLIC_PAGES = ["/", "/nodes/node-001", "/incidents", "/remediations"]
# What a signed-in operator's request reads before the page's own queries: its session and its user.
SIGNED_IN = 2


@pytest.fixture
def client(admin_client):
    """An operator signed in: the private listener's pages are for signed-in viewers only
    (console/pages/viewers.py); the public listener's ignore who is signed in."""
    return admin_client


def tiles(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-node="([^"]+)" data-state="([^"]+)"', html))


def floor_queries(client) -> int:
    client.get("/")  # placement's topology is read once per process after enrolment changes it
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/").status_code == 200
    return len(queries)


# -- the fleet floor -----------------------------------------------------------------------


def test_the_floor_shows_every_node_by_pod_and_rack_with_the_legend_and_capacity(client, db):
    enrol_default_fleet(50)
    html = client.get("/").content.decode()
    assert len(tiles(html)) == 50 and set(tiles(html).values()) == {"enrolled"}
    assert re.findall(r'data-pod="([^"]+)"', html) == ["p1", "p2"]
    assert len(re.findall(r'class="rack" data-rack="', html)) == 7
    for legend in ["available", "workload", "inspecting", "wiping", "quarantined", "maintenance", "enrolled"]:
        assert f'data-legend="{legend}"' in html
    assert re.search(r'data-legend="enrolled">.*?<strong>50</strong>', html)
    assert re.search(r'data-capacity="p1"><th scope="row">p1</th><td>32</td><td>0</td>', html)


def test_a_tile_names_its_node_state_tenant_and_step(client, alice, available_fleet):
    reservation = reservations.create_reservation(tenant=alice, node_count=1, actor="test")
    node = Node.objects.get(reservation=reservation)
    Node.objects.filter(pk=node.pk).update(step="booting tenant image", step_since=node.state_since)
    html = client.get("/").content.decode()
    assert f'title="{node.name} · provisioning · tenant alice · step booting tenant image"' in html
    assert re.search(r'data-legend="workload">.*?<strong>1</strong> <small>\(provisioning 1, active 0\)', html)


def test_htmx_polling_gets_the_floor_fragment_only(client, db):
    enrol_default_fleet()
    response = client.get("/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="floor" hx-get="/" hx-trigger="every 2s" hx-swap="outerHTML"')
    assert "<html" not in html and len(tiles(html)) == 12
    assert "HX-Request" in response["Vary"]


def test_the_floor_runs_as_many_queries_at_12_nodes_as_at_50(client, alice, db):
    make_available(enrol_default_fleet(12))
    bring_up(reservations.create_reservation(tenant=alice, node_count=3, actor="test"))
    at_12 = floor_queries(client)
    enrol_default_fleet(50)
    drive(Node.objects.get(name="node-040"), "operator_quarantine", reason="fan")
    at_50 = floor_queries(client)
    assert at_12 == at_50 <= 7 + SIGNED_IN  # the capacity's cut-off and held nodes among them


def test_a_large_floor_collapses_racks_into_bars_and_lists_nodes_out_of_service(client, db, monkeypatch):
    enrol_default_fleet(50)
    drive(Node.objects.get(name="node-007"), "operator_quarantine", reason="fan")
    tiled = floor_queries(client)
    monkeypatch.setattr(floor, "COLLAPSE_ABOVE", 20)
    html = client.get("/").content.decode()
    assert len(re.findall(r'class="rack-bar" data-rack="', html)) == 7
    assert tiles(html) == {"node-007": "quarantined"}
    assert 'title="r01: 1 quarantined, 7 enrolled"' in html
    assert floor_queries(client) == tiled
    # A rack opened from its bar shows its nodes one by one again.
    assert len(tiles(client.get("/?rack=r01").content.decode())) == 8


def test_the_floor_takes_the_node_lists_filters(client, db):
    enrol_default_fleet(50)
    drive(Node.objects.get(name="node-007"), "operator_quarantine", reason="fan")
    html = client.get("/?pod=p2").content.decode()
    assert re.findall(r'data-pod="([^"]+)"', html) == ["p2"] and len(tiles(html)) == 18
    assert "50 nodes, 18 shown" in html  # the legend still counts the whole fleet
    assert re.search(r'data-legend="enrolled">.*?<strong>49</strong>', html)
    html = client.get("/?rack=r01&rack=r07").content.decode()
    assert re.findall(r'class="rack" data-rack="([^"]+)"', html) == ["r01", "r07"] and len(tiles(html)) == 10
    html = client.get("/?state=quarantined&state=maintenance").content.decode()
    assert tiles(html) == {"node-007": "quarantined"}
    assert re.findall(r'class="rack" data-rack="([^"]+)"', html) == ["r01"]
    assert "No rack here" in client.get("/?pod=p9").content.decode()


def test_an_unknown_state_on_the_floor_is_the_apis_400(client, db):
    enrol_default_fleet()
    answer = client.get("/?state=on_fire")
    assert answer.status_code == 400 and answer.json()["detail"].startswith("state: unknown state on_fire; one of ")
    assert answer.json()["detail"] == client.get("/v1/nodes?state=on_fire").json()["detail"]


# -- a node --------------------------------------------------------------------------------


def test_the_node_page_shows_state_gpus_step_and_timeline(client, available_node):
    Node.objects.filter(pk=available_node.pk).update(step="power_on", step_since=available_node.state_since)
    html = client.get(f"/nodes/{available_node.name}").content.decode()
    assert 'data-node-state="available"' in html
    assert html.count('class="health-unknown"') == 8
    assert "power_on since" in html
    events = re.findall(r"<tr><td><time[^>]*>[^<]*</time></td><td>(\w+)</td>", html)
    assert events == ["attestation_passed", "inspection_passed", "inspection_started", "enrolled"]
    assert "Not attested yet." in html


def test_the_node_page_shows_the_verdict_each_failure_the_jwt_and_how_to_verify_it(client, available_node):
    result = signed_result(available_node)
    html = client.get(f"/nodes/{available_node.name}").content.decode()
    assert 'data-verdict="contraindicated"' in html
    assert "<td><code>unknown_component_digest</code></td><td>kernel</td>" in html
    assert f'<code class="digest">{"a1" * 32}</code></td><td><code class="digest">{"b2" * 32}</code>' in html
    assert f">{result.token}</textarea>" in html and 'data-copy="attestation-jwt"' in html
    assert "curl -s http://testserver/v1/attestation/keys > keys.json" in html
    assert "python -m attestation.verify result.jwt --jwks keys.json" in html


def test_the_node_page_shows_what_each_gpus_spdm_evidence_came_to_from_each_source(client, available_node):
    result = signed_result(available_node)
    read = {"driver": "560.35.03", "vbios": "96.00.99.00.01"}
    evidence = [
        {
            "index": 0,
            "uuid": "GPU-0",
            "gpu_evidence": {"source": source, "status": status, "failures": [], "versions": versions},
        }
        for source, status, versions in (("in_band", "affirming", read), ("out_of_band", "contraindicated", {}))
    ]
    AttestationResult.objects.filter(pk=result.pk).update(gpu_evidence=evidence)
    html = client.get(f"/nodes/{available_node.name}").content.decode()
    rows = re.findall(r'<tr data-gpu-evidence="0 (\w+)">(.*?)</tr>', html)
    assert [(source, re.findall(r"<td[^>]*>([^<]*)</td>", cells)) for source, cells in rows] == [
        ("in_band", ["0", "in_band", "affirming", "560.35.03", "96.00.99.00.01"]),
        ("out_of_band", ["0", "out_of_band", "contraindicated", "", ""]),
    ]


def test_an_unknown_node_is_404(client, db):
    assert client.get("/nodes/node-999").status_code == 404


# -- incidents, their replay, remediations -------------------------------------------------


@pytest.fixture
def xid_incident(transactional_db):
    make_available(enrol_default_fleet())
    return xid_under_a_tenant(Tenant.objects.create(name="acme"))


def test_an_automatic_remediation_is_a_timeline_to_its_replacement_active(client, xid_incident):
    applied, reservation, victim = xid_incident
    html = client.get("/incidents").content.decode()
    incident = html[html.index(f'data-incident="remediation-{applied.pk}"') :]
    steps = re.findall(r'<li class="(done|waiting)" data-step="(\w+)">', incident)
    assert steps == [
        ("done", "alert_firing"),
        ("done", "webhook_received"),
        ("done", "quarantined"),
        ("done", "replacement_placed"),
        ("done", "replacement_active"),
    ]
    replacement = Node.objects.filter(reservation=reservation).exclude(pk=victim.pk).order_by("-state_since").first()
    assert replacement is not None
    assert replacement.name in incident[: incident.index("</article>")]


def test_a_failed_attestation_is_a_timeline_from_release_to_the_verdict(client, alice, transactional_db):
    make_available(enrol_default_fleet())
    reservation = reservations.create_reservation(tenant=alice, node_count=1, actor="test")
    bring_up(reservation)
    result = failed_attestation_after_a_tenant(Node.objects.get(reservation=reservation))
    html = client.get("/incidents").content.decode()
    incident = html[html.index(f'data-incident="attestation-{result.pk}"') :]
    steps = re.findall(r'<li class="done" data-step="(\w+)">', incident[: incident.index("</article>")])
    assert steps == ["released", "wipe_succeeded", "inspection", "attestation_failed"]


BMC_DRIFT = "BMC expected GF-BMC 1.5.0 (sha256 5d41402abc4b2a76…) found GF-BMC 1.5.0-custom (sha256 7d793037a0760186…)"
RUNS_ITS_BASELINE = firmware.Found(components={}, bios_attributes={}, secure_boot=firmware.SecureBoot(True, "Enabled"))


def bmc_drift_found_after_a_tenant(node: Node) -> leases.Lease:
    """An active node released and wiped; its inspection's firmware check finds the BMC drifted and
    reflashes it: the worker's steps under its lease, as the inspection workflow records them."""
    drive(node, "released", "wipe_succeeded")
    (lease,) = leases.claim(owner="w1", node_ids=[node.pk])
    leases.set_step(lease, step="check_firmware", actor="worker:w1")
    reflash = {"drifts": [BMC_DRIFT], "repairing": ["BMC"]}
    leases.set_step(lease, step=StepName.FINISH_FIRMWARE_UPDATE, actor="worker:w1", detail=reflash)
    return lease


def incident_html(client, key: str) -> str:
    html = client.get("/incidents").content.decode()
    incident = html[html.index(f'data-incident="{key}"') :]
    return incident[: incident.index("</article>")]


def steps_of(incident: str) -> list[tuple[str, str]]:
    return re.findall(r'<li class="(done|waiting)" data-step="(\w+)">', incident)


def test_a_repaired_firmware_drift_is_a_timeline_to_the_node_available_again(client, alice, transactional_db):
    make_available(enrol_default_fleet())
    reservation = reservations.create_reservation(tenant=alice, node_count=1, actor="test")
    bring_up(reservation)
    node = Node.objects.get(reservation=reservation)
    lease = bmc_drift_found_after_a_tenant(node)
    services.record_firmware_check(
        node=node, actor="worker:w1", baseline="bmcsim-default", found=RUNS_ITS_BASELINE, repaired=["BMC"]
    )
    checked = AuditEvent.objects.get(node=node, event="firmware_checked")
    services.complete(lease, event="inspection_passed", actor="worker:w1")

    incident = incident_html(client, f"firmware-{checked.pk}")
    assert "firmware repaired: BMC (baseline bmcsim-default)" in incident and ">repaired</strong>" in incident
    assert BMC_DRIFT in incident and "matches baseline bmcsim-default after repairing BMC" in incident
    assert steps_of(incident) == [
        ("done", "released"),
        ("done", "wipe_succeeded"),
        ("done", "reflash"),
        ("done", "firmware_checked"),
        ("waiting", "available"),  # not attested yet
    ]
    services.complete(lease, event="attestation_passed", actor="worker:w1")
    assert steps_of(incident_html(client, f"firmware-{checked.pk}"))[-1] == ("done", "available")


def test_a_firmware_drift_that_survives_its_reflash_is_a_timeline_to_the_quarantine(client, alice, transactional_db):
    *nodes, commissioned = enrol_default_fleet()
    make_available(nodes)
    # Bringing a newly enrolled node to its baseline is commissioning, no incident.
    drive(commissioned, "inspection_started")
    services.record_firmware_check(
        node=commissioned,
        actor="worker:w1",
        baseline="bmcsim-default",
        found=RUNS_ITS_BASELINE,
        repaired=["Secure Boot"],
    )
    reservation = reservations.create_reservation(tenant=alice, node_count=2, actor="test")
    bring_up(reservation)
    drifted, clean = Node.objects.filter(reservation=reservation).order_by("name")
    lease = bmc_drift_found_after_a_tenant(drifted)
    services.complete(lease, event="firmware_drift", actor="worker:w1", reason=f"{BMC_DRIFT} (after repairing BMC)")
    quarantine = AuditEvent.objects.get(node=drifted, event="firmware_drift")
    # A firmware check that found nothing to repair is no incident.
    drive(clean, "released", "wipe_succeeded")
    services.record_firmware_check(
        node=clean, actor="worker:w1", baseline="bmcsim-default", found=RUNS_ITS_BASELINE, repaired=[]
    )

    incident = incident_html(client, f"firmware-{quarantine.pk}")
    assert f"firmware_drift: {BMC_DRIFT} (after repairing BMC)" in incident and ">quarantined</strong>" in incident
    assert steps_of(incident) == [
        ("done", "released"),
        ("done", "wipe_succeeded"),
        ("done", "reflash"),
        ("done", "firmware_drift"),
    ]
    assert [i.key for i in selectors.incidents(disclosure=Disclosure())] == [f"firmware-{quarantine.pk}"]

    url = f"/incidents/firmware-{quarantine.pk}/replay"
    last_step = int(re.findall(r"step \d+ of (\d+)", client.get(url).content.decode())[0])
    assert tiles(client.get(f"{url}?step={last_step}").content.decode())[drifted.name] == "quarantined"


def test_the_replay_starts_before_the_incident_and_steps_to_the_replacement(client, xid_incident):
    applied, reservation, victim = xid_incident
    url = f"/incidents/remediation-{applied.pk}/replay"
    first = client.get(url).content.decode()
    assert tiles(first)[victim.name] == "active"
    assert '<li aria-current="step" class="current">' in first and "before the incident" in first
    last_step = int(re.findall(r"step \d+ of (\d+)", first)[0])
    last = client.get(f"{url}?step={last_step}").content.decode()
    replacement = Node.objects.filter(reservation=reservation).exclude(pk=victim.pk).order_by("-state_since").first()
    assert replacement is not None
    assert tiles(last)[victim.name] == "quarantined" and tiles(last)[replacement.name] == "active"
    assert tiles(first)[replacement.name] == "available"
    fragment = client.get(f"{url}?step=1", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="replay"') and 'data-step="1"' in fragment


def test_an_unknown_incident_has_no_replay(client, db):
    assert client.get("/incidents/remediation-999/replay").status_code == 404
    assert client.get("/incidents/nonsense/replay").status_code == 404


def test_remediations_lists_applied_and_suppressed_newest_first(client, xid_incident, settings):
    applied, _, _ = xid_incident
    settings.TENANT_FAULT_BUDGET = 0  # globex's node's own alert: past its budget, suppressed
    suppressed, _, _ = xid_under_a_tenant(Tenant.objects.create(name="globex"))
    html = client.get("/remediations").content.decode()
    rows = re.findall(r'data-remediation="(\d+)">\s*<td>.*?</td>\s*<td class="outcome-(\w+)">', html, re.S)
    assert rows == [(str(suppressed.pk), "suppressed"), (str(applied.pk), "applied")]
    assert "XID 140 on GPU 3" in html and "GPUFatalXid" in html


def test_remediations_show_shadow_decisions_apart_from_what_was_done(client, xid_incident, settings):
    from remediation import rules
    from remediation import services as remediation_services

    applied, _, _ = xid_incident
    settings.REMEDIATION_SHADOW_RULES = ["gpu_lost"]
    [firing] = rules.parse_webhook(payload(alert("node-010", xid=79, gpu=1, n=7)))
    assert isinstance(firing, rules.Alert)
    (shadow,) = remediation_services.receive_alerts([firing])
    html = client.get("/remediations").content.decode()
    done = re.findall(r'data-remediation="(\d+)"', html)
    assert str(shadow.pk) not in done and str(applied.pk) in done
    assert re.findall(r'data-shadow="(\d+)"', html) == [str(shadow.pk)]
    (tally,) = re.findall(r'<tr data-shadow-ladder="gpu_lost">(.*?)</tr>', html)
    assert re.findall(r"<td>(.*?)</td>", tally) == ["gpu_lost", "reboot", "1", "1"]
    assert "shadow: would reboot; XID 79 on GPU 1" in html


def test_a_node_page_counts_its_remediations_toward_the_repeat_offender_rule(client, xid_incident):
    _, _, victim = xid_incident
    html = client.get(f"/nodes/{victim.name}").content.decode()
    (said,) = re.findall(r"<p class=\"muted\" data-repeat-offender>(.*?)</p>", html)
    assert said == (
        "Remediated 1 time in the last 7 days: at 3, a node is quarantined as a repeat offender and an RMA suggested."
    )


def test_public_pages_have_no_form_that_posts(client, xid_incident):
    applied, _, _ = xid_incident
    for url in [*PUBLIC_PAGES, f"/incidents/remediation-{applied.pk}/replay"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert 'method="post"' not in response.content.decode().lower(), url
        assert client.post(url).status_code == 405, url


# -- a tenant's reservations ---------------------------------------------------------------


@pytest.fixture
def alice_user(alice, django_user_model):
    alice.user = django_user_model.objects.create_user("alice", password="alice-password-1")
    alice.save()
    return alice.user


def test_a_tenant_sees_only_their_own_reservations(client, alice, bob, alice_user, available_fleet):
    mine = reservations.create_reservation(tenant=alice, node_count=2, actor="test")
    theirs = reservations.create_reservation(tenant=bob, node_count=1, actor="test")
    client.force_login(alice_user)
    html = client.get("/my/reservations").content.decode()
    assert f'data-reservation="{mine.pk}"' in html and f'data-reservation="{theirs.pk}"' not in html
    for node in Node.objects.filter(reservation=mine):
        assert f"{node.name} provisioning</a>" in html
    for node in Node.objects.filter(reservation=theirs):
        assert node.name not in html


def test_a_user_without_a_tenant_is_told_so(client, django_user_model, db):
    client.force_login(django_user_model.objects.create_user("carol", password="carol-password-1"))
    html = client.get("/my/reservations").content.decode()
    assert "Your account is not a tenant's" in html


def test_reservations_need_a_login_and_the_login_page_leads_there(alice_user):
    client = Client()  # signed out, unlike this module's `client`
    response = client.get("/my/reservations")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/my/reservations"
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password-1"})
    assert response.status_code == 302 and response["Location"] == "/my/reservations"
    assert (
        "Signed in as <strong>alice</strong> for tenant <strong>alice</strong>"
        in client.get("/my/reservations").content.decode()
    )
    assert client.post("/accounts/logout/").status_code == 200
    assert client.get("/my/reservations").status_code == 302


@pytest.mark.urls("gpufleet.urls_public")
def test_the_public_listener_serves_the_pages_with_no_link_to_a_tenant_page(client, xid_incident):
    applied, _, _ = xid_incident
    for url in [*PUBLIC_PAGES, f"/incidents/remediation-{applied.pk}/replay"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert "My reservations" not in response.content.decode(), url
    assert client.get("/my/reservations").status_code == 404
    assert client.get("/accounts/login/").status_code == 404
