"""Single sign-on (reservations/oidc.py): the roles claim as memberships, and the whole sign-in
through a real OpenID provider (panva's oidc-provider, tests/support/oidc_provider) in Chromium."""

import importlib
import json
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
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


OPERATOR, GROUP_PREFIX = "gpufleet:operator", "gpufleet:group:"


def test_the_claim_is_read_as_organisations_and_roles():
    claimed = read_roles_claim(
        ["acme:admin", "globex:VIEWER", "globex:member", "initech:owner", "nocolon", ":admin", 7, "GPUFLEET:Operator"],
        OPERATOR,
        GROUP_PREFIX,
    )
    assert claimed.roles == {"acme": access.Role.ADMIN, "globex": access.Role.MEMBER}
    assert claimed.operator and claimed.admin_groups == frozenset()
    assert read_roles_claim("acme:viewer, globex:admin", OPERATOR, GROUP_PREFIX).roles == {
        "acme": access.Role.VIEWER,
        "globex": access.Role.ADMIN,
    }
    assert read_roles_claim(None, OPERATOR, GROUP_PREFIX) == read_roles_claim([], OPERATOR, GROUP_PREFIX)


def test_group_entries_name_the_admins_groups_and_no_organisation():
    claimed = read_roles_claim(
        [
            "gpufleet:group:auditors",
            "GPUFLEET:GROUP:Rollouts",
            "gpufleet:group:",
            "gpufleet:group:admin",
            "acme:viewer",
        ],
        OPERATOR,
        GROUP_PREFIX,
    )
    assert claimed.admin_groups == {"auditors", "Rollouts", "admin"}
    # `gpufleet:group:admin` is not the role admin of an organisation `gpufleet:group`.
    assert claimed.roles == {"acme": access.Role.VIEWER}
    assert not claimed.operator
    assert read_roles_claim("gpufleet:group:auditors gpufleet:operator", OPERATOR, "ops/").admin_groups == frozenset()
    # No prefix, no groups: the entry is read as an organisation's role.
    assert read_roles_claim(["gpufleet:group:admin"], OPERATOR, "") == read_roles_claim(
        ["gpufleet:group:admin"], OPERATOR, "nothing:"
    )


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


def test_group_entries_make_staff_in_exactly_the_groups_named_that_exist(backend, organisations):
    auditors, rollouts, _ = (Group.objects.create(name=name) for name in ("auditors", "rollouts", "unclaimed"))
    user = backend.create_user({"sub": "g", "groups": ["gpufleet:group:auditors", "gpufleet:group:nosuch"]})
    user.refresh_from_db()
    assert list(user.groups.all()) == [auditors]
    assert user.is_staff and not user.is_superuser and roles_of(user) == {}
    backend.update_user(user, {"sub": "g", "groups": ["gpufleet:group:rollouts", "acme:viewer"]})
    assert list(user.groups.all()) == [rollouts] and roles_of(user) == {"acme": "viewer"}
    backend.update_user(user, {"sub": "g", "groups": ["gpufleet:operator", "gpufleet:group:rollouts"]})
    user.refresh_from_db()
    assert user.is_staff and user.is_superuser and list(user.groups.all()) == [rollouts]
    # A group given by hand goes too: the claim says which.
    user.groups.add(auditors)
    backend.update_user(user, {"sub": "g", "groups": ["acme:viewer"]})
    user.refresh_from_db()
    assert not user.groups.exists() and not user.is_staff and not user.is_superuser


def test_a_group_entry_naming_no_group_makes_no_staff(backend, organisations):
    user = backend.create_user({"sub": "h", "groups": ["gpufleet:group:nosuch"]})
    user.refresh_from_db()
    assert not user.is_staff and not user.groups.exists()


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
    admin_login = client.get("/admin/login/?next=/admin/").content.decode()
    assert 'id="login-form"' in admin_login and "single sign-on" not in admin_login
    assert "reservations.oidc.RolesClaimBackend" not in settings.AUTHENTICATION_BACKENDS


# With single sign-on on: the settings gpufleet/settings.py makes with an issuer, and its routes.


def reload_urls() -> None:
    import console.pages.urls
    import gpufleet.urls

    importlib.reload(console.pages.urls)
    importlib.reload(gpufleet.urls)
    clear_url_caches()


@contextmanager
def single_sign_on(issuer: str, provider_settings: dict, renew_seconds: int = 900):
    """OIDC's settings, backend, middleware and routes on, as for GPUFLEET_OIDC_ISSUER=issuer."""
    middleware = list(settings.MIDDLEWARE)
    authentication = middleware.index("django.contrib.auth.middleware.AuthenticationMiddleware")
    middleware.insert(authentication + 1, settings.OIDC_MIDDLEWARE)
    overrides = provider_settings | {
        "OIDC_ENABLED": True,
        "OIDC_ISSUER": issuer,
        "OIDC_RP_CLIENT_ID": "gpufleet",
        "OIDC_RP_CLIENT_SECRET": "test-secret",
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": renew_seconds,
        "AUTHENTICATION_BACKENDS": [*settings.AUTHENTICATION_BACKENDS, settings.OIDC_AUTHENTICATION_BACKEND],
        "MIDDLEWARE": middleware,
    }
    try:
        with override_settings(**overrides):
            reload_urls()
            yield
    finally:
        reload_urls()


AUTHORIZATION_ENDPOINT = "http://provider.invalid/auth"


@pytest.fixture
def sso_settings(db):
    """Single sign-on on, for Django's test client: a provider that need not answer."""
    provider_settings = {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": AUTHORIZATION_ENDPOINT,
        "OIDC_OP_TOKEN_ENDPOINT": "http://provider.invalid/token",
        "OIDC_OP_USER_ENDPOINT": "http://provider.invalid/me",
        "OIDC_OP_JWKS_ENDPOINT": "http://provider.invalid/jwks",
        "OIDC_RP_SIGN_ALGO": "RS256",
    }
    with single_sign_on("http://provider.invalid", provider_settings):
        yield


def test_the_admins_login_page_offers_single_sign_on_back_to_the_admin(sso_settings, client):
    response = client.get("/admin/", follow=True)
    page = response.content.decode()
    assert response.redirect_chain == [("/admin/login/?next=/admin/", 302)]
    assert 'id="login-form"' in page  # the password beside it
    assert '<a href="/oidc/authenticate/?next=/admin/">Sign in with single sign-on</a>' in page
    assert "Sign in with single sign-on" in client.get("/accounts/login/").content.decode()


@pytest.fixture
def oidc_signed_in(sso_settings, client, django_user_model):
    """A client signed in through single sign-on as an operator, the ID token's renewal due."""
    user = django_user_model.objects.create_user(username_for("alice"), is_staff=True)
    client.force_login(user, backend=settings.OIDC_AUTHENTICATION_BACKEND)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    return client


def test_an_htmx_poll_due_for_renewal_is_sent_to_the_provider_by_hx_redirect(oidc_signed_in):
    client = oidc_signed_in
    response = client.get("/?pod=a", headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Location" not in response
    assert response["HX-Redirect"].startswith(f"{AUTHORIZATION_ENDPOINT}?")
    assert "prompt=none" in response["HX-Redirect"]
    assert client.session["oidc_login_next"] == "/?pod=a"  # where the provider sends the browser back


def test_a_page_due_for_renewal_is_still_redirected_and_a_poll_not_due_is_answered(oidc_signed_in):
    client = oidc_signed_in
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith(f"{AUTHORIZATION_ENDPOINT}?")
    assert "HX-Redirect" not in response
    session = client.session
    session["oidc_id_token_expiration"] = time.time() + 60
    session.save()
    response = client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 200 and "HX-Redirect" not in response
    assert response.content.decode().startswith('<div id="floor"')  # the fragment the poll swaps in


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


@pytest.fixture
def sso_server(provider, transactional_db):
    """A live server of the private listener with single sign-on on, pointing at the provider."""
    provider_settings = oidc_provider_settings(provider["issuer"], timeout=10)
    with single_sign_on(provider["issuer"], provider_settings, renew_seconds=3):
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


@pytest.mark.browser
@pytest.mark.e2e
def test_an_operator_signs_in_through_the_admins_link_and_the_floors_poll_renews(provider, sso_server, chromium_page):
    from playwright.sync_api import expect

    page = chromium_page
    write_users(provider["users"], ["gpufleet:operator"])
    page.goto(f"{sso_server}/admin/")
    expect(page).to_have_url(f"{sso_server}/admin/login/?next=/admin/")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    page.locator("input[name=login]").fill("alice")
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    expect(page).to_have_url(f"{sso_server}/admin/")
    expect(page.locator("#site-name")).to_be_visible()  # the admin's index, not its login
    user = get_user_model().objects.get(username="oidc-alice")
    assert user.is_staff and user.is_superuser

    # The provider takes the operator away. Nothing but the floor's htmx poll asks once the ID
    # token's renewal is due: its HX-Redirect takes the browser through the provider's silent
    # sign-in and back to the floor, and the operator is gone.
    page.goto(f"{sso_server}/")
    write_users(provider["users"], [])
    with page.expect_request(
        lambda request: request.is_navigation_request() and request.url.startswith(f"{provider['issuer']}/"),
        timeout=15_000,
    ) as silent_sign_in:
        pass
    assert "prompt=none" in silent_sign_in.value.url
    expect(page).to_have_url(f"{sso_server}/")
    expect(page.locator("#floor")).to_be_visible()
    user.refresh_from_db()
    assert not user.is_staff and not user.is_superuser
