"""Operators' logins: throttled per username and address on both login pages (django-axes), and
`check --deploy` refuses an operator account that still opens with the demo's password."""

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from tests.support import REPO_ROOT

pytestmark = pytest.mark.django_db

LOGIN_PAGES = ["/admin/login/", "/accounts/login/"]
PASSWORD = "a-long-operator-passphrase-71"


@pytest.fixture
def operator(db):
    return get_user_model().objects.create_user("ops", password=PASSWORD, is_staff=True)


def log_in(client, page, password, username="ops", address="127.0.0.1"):
    return client.post(page, {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def fail(client, page, times, **who):
    for _ in range(times):
        assert log_in(client, page, "wrong-guess", **who).status_code in (200, 429)
    assert not logged_in(client)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_after_the_failure_limit_the_right_password_is_refused_for_that_user_from_that_address(client, operator, page):
    fail(client, page, settings.AXES_FAILURE_LIMIT)
    answer = log_in(client, page, PASSWORD)
    assert answer.status_code == 429
    assert "too many login attempts" in answer.content.decode()
    assert not logged_in(client)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_fewer_failures_then_the_right_password_logs_in_and_the_count_starts_afresh(client, operator, page):
    fail(client, page, settings.AXES_FAILURE_LIMIT - 1)
    assert log_in(client, page, PASSWORD).status_code == 302 and logged_in(client)
    client.logout()
    fail(client, page, settings.AXES_FAILURE_LIMIT - 1)
    assert log_in(client, page, PASSWORD).status_code == 302 and logged_in(client)


def test_a_lockout_holds_only_that_user_from_that_address(operator):
    attacker = Client()
    fail(attacker, "/admin/login/", settings.AXES_FAILURE_LIMIT)
    get_user_model().objects.create_user("dev", password=PASSWORD, is_staff=True)
    assert log_in(attacker, "/admin/login/", PASSWORD, username="dev").status_code == 302
    elsewhere = Client()
    assert log_in(elsewhere, "/admin/login/", PASSWORD, address="10.0.0.2").status_code == 302
    assert logged_in(elsewhere)


def test_a_lockout_ends_after_the_cool_off(client, operator):
    fail(client, "/admin/login/", settings.AXES_FAILURE_LIMIT)
    assert log_in(client, "/admin/login/", PASSWORD).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert log_in(client, "/admin/login/", PASSWORD).status_code == 302 and logged_in(client)


def deploy_check_ids() -> set[str | None]:
    return {message.id for message in run_checks(include_deployment_checks=True)}


def test_check_deploy_flags_an_operator_who_logs_in_with_the_demos_password(monkeypatch):
    monkeypatch.delenv("GPUFLEET_OPERATOR_PASSWORD", raising=False)
    call_command("ensure_operator", stdout=StringIO())  # what make demo does: admin / admin
    get_user_model().objects.create_user("tenant-user", password="admin")  # not an operator
    (warning,) = [m for m in run_checks(include_deployment_checks=True) if m.id == "gpufleet.W003"]
    assert "Operator account(s) admin log in with the demo's default password" in warning.msg
    admin = get_user_model().objects.get(username="admin")
    admin.set_password(PASSWORD)
    admin.save()
    assert "gpufleet.W003" not in deploy_check_ids()


def test_check_deploy_says_when_it_could_not_read_the_operators():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=REPO_ROOT,
        env={**env, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpufleet_no_such_database"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "gpufleet.I001" in result.stderr + result.stdout
    assert "gpufleet.W003" not in result.stderr + result.stdout
