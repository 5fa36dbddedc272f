"""Production settings come from the environment, and `manage.py check --deploy` is clean with them."""

import os
import secrets
import subprocess
import sys

from tests.support import REPO_ROOT


def check_deploy(**env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "SECRET_KEY", "ALLOWED_HOSTS"))}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "gpufleet.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    from attestation.ear import generate_signing_key

    generate_signing_key(tmp_path / "signing.pem")
    result = check_deploy(
        GPUFLEET_SIGNING_KEY=str(tmp_path / "signing.pem"),
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="fleet.example.net",
        GPUFLEET_HTTPS="1",
        GPUFLEET_WEBHOOK_TOKEN=secrets.token_urlsafe(32),
        GPUFLEET_PROMETHEUS_TOKEN=secrets.token_urlsafe(32),
        GPUFLEET_FABRIC_REDFISH_PASSWORD=secrets.token_urlsafe(16),
        GPUFLEET_ETHERNET_MANAGER_URL="https://nvue.fabric.example.net:8765/{switch}",
        GPUFLEET_INFINIBAND_MANAGER_URL="https://ufm-{fabric}.fabric.example.net",
        GPUFLEET_NVLINK_MANAGER_URL="https://nmx-{domain}.fabric.example.net",
        # Not the demo's database, whose operator `admin` rightly fails the check (gpufleet.W003).
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/gpufleet_deploy_check_no_such_database",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_development_defaults_do_not_pass_for_production():
    result = check_deploy()
    assert result.returncode != 0
    found = result.stderr + result.stdout
    assert "security.W009" in found  # the development SECRET_KEY
    for ours in (
        "gpufleet.W001",
        "gpufleet.W002",
        "gpufleet.W004",
        "gpufleet.W005",
        "gpufleet.W006",
    ):  # our own development defaults
        assert ours in found, ours


def test_each_fabric_manager_left_at_bmcsim_is_named():
    result = check_deploy(GPUFLEET_ETHERNET_MANAGER_URL="https://nvue.example.net:8765/{switch}")
    found = result.stderr + result.stdout
    assert "GPUFLEET_ETHERNET_MANAGER_URL is bmcsim's" not in found
    assert "GPUFLEET_INFINIBAND_MANAGER_URL is bmcsim's" in found
    assert "GPUFLEET_NVLINK_MANAGER_URL is bmcsim's" in found
