"""Single sign-on (reservations/oidc.py): the roles claim as memberships, and the whole sign-in
through a real OpenID provider (panva's oidc-provider, tests/support/oidc_provider) in Chromium."""

import importlib
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import override_settings
from django.test.testcases import LiveServerThread, _StaticFilesHandler
from django.urls import clear_url_caches

from gpufleet.oidc_discovery import oidc_provider_settings
from reservations import access
from reservations.models import Membership, Tenant
from reservations.oidc import RolesClaimBackend, apply_claims, read_roles_claim, username_for

PROVIDER = Path(__file__).resolve().parents[1] / "support" / "oidc_provider"


def roles_of(user) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("tenant__name", "role"))


@pytest.fixture
def organisations(db) -> list[Tenant]:
    return [Tenant.objects.create(name=name) for name in ("acme", "globex", "initech")]


@pytest.fixture
def backend(settings) -> RolesClaimBackend:
    settings.OIDC_OP_TOKEN_ENDPOINT = "http://provider.invalid/token"
    settings.OIDC_OP_USER_ENDPOINT = "http://provider.invalid/me"
    settings.OIDC_OP_JWKS_ENDPOINT = "http://provider.invalid/jwks"
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    return RolesClaimBackend()


def test_the_claim_is_read_as_organisations_and_roles():
    claimed = read_roles_claim(
        ["acme:admin", "globex:VIEWER", "globex:member", "initech:owner", "nocolon", ":admin", 7, "GPUFLEET:Operator"],
        "gpufleet:operator",
    )
    assert claimed.roles == {"acme": access.Role.ADMIN, "globex": access.Role.MEMBER}
    assert claimed.operator
    assert read_roles_claim("acme:viewer, globex:admin", "gpufleet:operator").roles == {
        "acme": access.Role.VIEWER,
        "globex": access.Role.ADMIN,
    }
    assert read_roles_claim(None, "gpufleet:operator") == read_roles_claim([], "gpufleet:operator")


def test_a_first_sign_in_creates_the_user_by_sub_with_the_claimed_memberships(backend, organisations):
    claims = {"sub": "u-123", "email": "ann@example.com", "groups": ["acme:admin", "globex:viewer", "umbrella:admin"]}
    assert not backend.filter_users_by_claims(claims).exists()
    user = backend.create_user(claims)
    assert user.username == "oidc-u-123" and user.email == "ann@example.com"
    assert not user.has_usable_password()
    assert roles_of(user) == {"acme": "admin", "globex": "viewer"}  # umbrella: no such organisation
    assert not user.is_staff and not user.is_superuser
    assert list(backend.filter_users_by_claims(claims)) == [user]


def test_each_sign_in_updates_adds_and_removes_memberships(backend, organisations):
    user = backend.create_user({"sub": "u-1", "groups": ["acme:admin", "globex:viewer"]})
    backend.update_user(user, {"sub": "u-1", "groups": ["acme:viewer", "initech:member"]})
    assert roles_of(user) == {"acme": "viewer", "initech": "member"}
    backend.update_user(user, {"sub": "u-1", "groups": []})
    assert roles_of(user) == {}


def test_a_membership_made_here_goes_when_the_claim_does_not_name_it(backend, organisations):
    user = backend.create_user({"sub": "u-2", "groups": []})
    Membership.objects.create(user=user, tenant=organisations[0], role="member")  # an invitation accepted
    backend.update_user(user, {"sub": "u-2", "groups": ["globex:member"]})
    assert roles_of(user) == {"globex": "member"}


def test_the_operator_entry_makes_an_operator_and_its_absence_takes_it_away(backend, organisations, settings):
    user = backend.create_user({"sub": "op", "groups": ["gpufleet:operator"]})
    user.refresh_from_db()
    assert user.is_staff and user.is_superuser and roles_of(user) == {}
    backend.update_user(user, {"sub": "op", "groups": ["acme:viewer"]})
    user.refresh_from_db()
    assert not user.is_staff and not user.is_superuser
    settings.OIDC_OPERATOR_ROLE = "platform-admins"
    settings.OIDC_ROLES_CLAIM = "roles"
    apply_claims(user, {"sub": "op", "roles": ["platform-admins"], "groups": ["gpufleet:operator", "acme:admin"]})
    user.refresh_from_db()
    assert user.is_staff and roles_of(user) == {}


def test_a_user_of_the_same_name_made_with_a_password_is_not_matched(backend, organisations, django_user_model):
    django_user_model.objects.create_user("ann", password="ann-password-1", email="ann@example.com")
    assert not backend.filter_users_by_claims({"sub": "ann", "email": "ann@example.com"}).exists()
    assert backend.verify_claims({"sub": "ann"}) and not backend.verify_claims({"email": "ann@example.com"})


def test_a_long_subject_makes_a_username_that_fits():
    assert username_for("x" * 255).startswith("oidc-sha256-") and len(username_for("x" * 255)) <= 150
    assert username_for("abc") == "oidc-abc"


def test_without_an_issuer_there_are_no_routes_and_no_link(client, db):
    assert not settings.OIDC_ENABLED
    assert client.get("/oidc/authenticate/").status_code == 404
    assert "single sign-on" not in client.get("/accounts/login/").content.decode()
    assert "reservations.oidc.RolesClaimBackend" not in settings.AUTHENTICATION_BACKENDS


# End to end: the provider in Node, a live server with single sign-on on, and Chromium.


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_users(path: Path, groups: list[str]) -> None:
    path.write_text(json.dumps([{"sub": "alice", "email": "alice@example.com", "groups": groups}]))


@pytest.fixture
def provider(tmp_path):
    """The provider, for a Django server at the port it yields with it."""
    if not (PROVIDER / "node_modules" / "oidc-provider").exists():
        pytest.fail(f"the provider's packages are missing: npm ci --prefix {PROVIDER}")
    users, django_port, port = tmp_path / "users.json", free_port(), free_port()
    write_users(users, ["acme:member"])
    process = subprocess.Popen(
        [
            *("node", str(PROVIDER / "provider.mjs"), "--port", str(port), "--users", str(users)),
            *("--client-id", "gpufleet", "--client-secret", "test-secret"),
            *("--redirect-uri", f"http://127.0.0.1:{django_port}/oidc/callback/"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ready "), f"the provider did not start: {line!r}"
        yield {"issuer": line.split()[1], "users": users, "django_port": django_port}
    finally:
        process.terminate()
        process.wait(10)


def reload_urls() -> None:
    import console.pages.urls
    import gpufleet.urls

    importlib.reload(console.pages.urls)
    importlib.reload(gpufleet.urls)
    clear_url_caches()


@pytest.fixture
def sso_server(provider, transactional_db):
    """A live server of the private listener with single sign-on on, pointing at the provider."""
    middleware = list(settings.MIDDLEWARE)
    authentication = middleware.index("django.contrib.auth.middleware.AuthenticationMiddleware")
    middleware.insert(authentication + 1, settings.OIDC_MIDDLEWARE)
    overrides = oidc_provider_settings(provider["issuer"], timeout=10) | {
        "OIDC_ENABLED": True,
        "OIDC_ISSUER": provider["issuer"],
        "OIDC_RP_CLIENT_ID": "gpufleet",
        "OIDC_RP_CLIENT_SECRET": "test-secret",
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": 3,
        "AUTHENTICATION_BACKENDS": [*settings.AUTHENTICATION_BACKENDS, settings.OIDC_AUTHENTICATION_BACKEND],
        "MIDDLEWARE": middleware,
    }
    with override_settings(**overrides):
        reload_urls()
        # A server of its own rather than pytest-django's live_server, which may have started
        # (with its middleware) before these settings.
        server = LiveServerThread("127.0.0.1", _StaticFilesHandler, port=provider["django_port"])
        server.daemon = True
        server.start()
        server.is_ready.wait()
        try:
            if server.error:
                raise server.error
            yield f"http://127.0.0.1:{server.port}"
        finally:
            server.terminate()
            server.join()
    reload_urls()


@pytest.fixture
def chromium_page():
    from playwright.sync_api import sync_playwright

    from tests.console.pages.test_browser import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_context().new_page()
        finally:
            browser.close()
            # Playwright runs the test in a context of its own, whose database connection would
            # outlive the test (and keep the test database from being dropped).
            connections.close_all()


@pytest.mark.browser
@pytest.mark.e2e
def test_signing_in_at_the_provider_and_losing_the_role_there(provider, sso_server, chromium_page):
    from playwright.sync_api import expect

    page = chromium_page
    Tenant.objects.create(name="acme")
    page.goto(f"{sso_server}/my/reservations")
    expect(page).to_have_url(f"{sso_server}/accounts/login/?next=/my/reservations")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    # The provider's own sign-in form (oidc-provider's development interactions).
    page.locator("input[name=login]").fill("alice")
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    expect(page).to_have_url(f"{sso_server}/my/reservations")
    expect(page.locator("body")).to_contain_text("Signed in as oidc-alice for tenant acme (member).")
    user = get_user_model().objects.get(username="oidc-alice")
    assert roles_of(user) == {"acme": "member"}

    # The provider takes the role away; once the ID token's renewal is due, the next page is the
    # provider's silent sign-in (prompt=none) and back, with the membership gone.
    write_users(provider["users"], ["umbrella:admin"])
    time.sleep(3.5)
    page.goto(f"{sso_server}/my/reservations")
    expect(page).to_have_url(f"{sso_server}/my/reservations")
    expect(page.locator("body")).to_contain_text("Signed in as oidc-alice")
    expect(page.locator("body")).not_to_contain_text("for tenant")
    assert roles_of(user) == {}
