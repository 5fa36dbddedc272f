"""The pages in a real browser: Debian's chromium driven by Playwright against a live server."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect, sync_playwright

from fleet.models import Node
from fleet.services import transition
from reservations import services as reservations
from reservations.models import Reservation, Tenant
from tests.support.factories import bring_up, drive, enrol_default_fleet, make_available, signed_result

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(scope="module")
def browser():
    # A missing browser is a broken test machine, not a reason to skip: fail loudly.
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # between browser steps (and the database flush after each) are still plain synchronous calls.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    yield context.new_page()
    context.close()


@pytest.fixture
def default_fleet(transactional_db) -> list[Node]:
    return enrol_default_fleet(50)


@pytest.fixture
def operator(page, live_server, transactional_db, django_user_model) -> None:
    """The browser signed in as an operator: the private listener's fleet pages are for signed-in
    viewers only (console/pages/viewers.py)."""
    client = Client()
    client.force_login(django_user_model.objects.create_user("operator", is_staff=True))
    session = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": session.key, "value": session.value, "url": live_server.url}])


def test_the_floor_shows_50_tiles_in_7_racks_and_2_pods(page, operator, live_server, default_fleet):
    page.goto(live_server.url)
    expect(page.locator(".tile[data-node]")).to_have_count(50)
    expect(page.locator(".rack")).to_have_count(7)
    expect(page.locator(".pod")).to_have_count(2)
    expect(page.locator('.pod[data-pod="p2"] .rack')).to_have_count(3)
    expect(page.locator('[data-node="node-001"]')).to_have_attribute("title", "node-001 · enrolled")


def test_a_quarantine_turns_its_tile_red_without_a_reload(page, operator, live_server, default_fleet):
    page.goto(live_server.url)
    tile = page.locator('[data-node="node-010"]')
    expect(tile).to_have_attribute("data-state", "enrolled")
    page.evaluate("window.notReloaded = true")

    transition(node_id=default_fleet[9].pk, event="operator_quarantine", actor="test", reason="fan failure")

    expect(tile).to_have_attribute("data-state", "quarantined", timeout=6000)
    expect(tile).to_have_class(re.compile(r"\bs-quarantined\b"))
    expect(page.locator('[data-legend="quarantined"] strong')).to_have_text("1")
    assert page.evaluate("window.notReloaded") is True


def test_the_node_page_shows_the_attestation_verdict_and_copies_its_jwt(page, operator, live_server, default_fleet):
    node = make_available(default_fleet[:1])[0]
    result = signed_result(node)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{live_server.url}/nodes/{node.name}")
    expect(page.locator("[data-verdict]")).to_contain_text("contraindicated")
    expect(page.locator("table.failures tbody tr")).to_have_count(1)
    expect(page.locator("table.failures")).to_contain_text("unknown_component_digest")
    expect(page.locator("#verify-command")).to_contain_text("python -m attestation.verify result.jwt --jwks keys.json")
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == result.token


def test_a_screenshot_of_the_busy_floor(page, operator, live_server, default_fleet, alice):
    """The floor as the README shows it: tenants at work, nodes being wiped, inspected, quarantined."""
    make_available(default_fleet[:44])
    bring_up(reservations.create_reservation(tenant=alice, node_count=12, actor="test"))
    reservations.create_reservation(tenant=alice, node_count=4, actor="test")
    nodes = {n.name: n for n in Node.objects.all()}
    drive(nodes["node-003"], "operator_quarantine", reason="XID 79 on GPU 3")
    drive(nodes["node-021"], "operator_maintenance", reason="PSU swap")
    for name in ["node-045", "node-046", "node-047"]:
        drive(nodes[name], "inspection_started")
    wiping = Node.objects.filter(state="active").order_by("name").last()
    assert wiping is not None
    drive(wiping, "released")

    page.goto(live_server.url)
    expect(page.locator('[data-node="node-003"]')).to_have_attribute("data-state", "quarantined")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "fleet-floor.png", full_page=True)
    assert (ARTIFACTS / "fleet-floor.png").stat().st_size > 10_000


def test_a_tenant_signs_in_and_reserves_nodes_with_the_form(page, live_server, transactional_db, django_user_model):
    make_available(enrol_default_fleet(12))
    tenant = Tenant.objects.create(
        name="alice", user=django_user_model.objects.create_user("alice", password="alice-password-1")
    )
    page.goto(f"{live_server.url}/my/reservations")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password-1")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator('[data-capacity="p2"]')).to_contain_text("4")

    form = page.locator('form[data-form="reserve"]')
    form.get_by_label("Nodes", exact=True).fill("2")
    form.get_by_label("Pod", exact=True).select_option("p2")
    form.get_by_label("Duration (hours)").fill("3")
    form.get_by_label("User data").fill("#!/bin/sh\necho hello\n")
    form.get_by_role("button", name="Reserve").click()

    reservation = Reservation.objects.get(tenant=tenant)
    expect(page.locator(".messages")).to_contain_text(f"Reservation {reservation.pk}: 2 node(s) in p2")
    expect(page.locator(f'tr[data-reservation="{reservation.pk}"]')).to_contain_text("provisioning")
    expect(page.locator('[data-capacity="p2"] td').nth(1)).to_have_text("2")  # available now
    assert reservation.pod is not None
    assert (reservation.node_count, reservation.pod.name) == (2, "p2")
    assert reservation.user_data == "#!/bin/sh\necho hello\n"  # the browser's CRLF undone

    page.get_by_text("Release…").click()
    page.get_by_role("button", name=f"Release reservation {reservation.pk}").click()
    expect(page.locator(".messages")).to_contain_text(f"Reservation {reservation.pk} is released")
    assert Reservation.objects.get(pk=reservation.pk).state == "released"
