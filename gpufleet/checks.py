"""`manage.py check --deploy` also refuses our own development defaults in production."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password
from django.core.checks import Error, Info, Tags, Warning, register
from django.db import DatabaseError
from django.db.models import Q

from remediation.rules import LADDERS


@register(Tags.security, deploy=True)
def development_secrets(app_configs, **kwargs):
    problems = []
    if settings.GPUFLEET_WEBHOOK_TOKEN == settings.DEVELOPMENT_WEBHOOK_TOKEN:
        problems.append(
            Warning(
                "GPUFLEET_WEBHOOK_TOKEN is the development token: anyone could send alerts.",
                hint="Set GPUFLEET_WEBHOOK_TOKEN to a long random value, and give Alertmanager the same.",
                id="gpufleet.W001",
            )
        )
    if settings.GPUFLEET_PROMETHEUS_TOKEN == settings.DEVELOPMENT_PROMETHEUS_TOKEN:
        problems.append(
            Warning(
                "GPUFLEET_PROMETHEUS_TOKEN is the development token: anyone could list agents and read the metrics.",
                hint="Set GPUFLEET_PROMETHEUS_TOKEN to a long random value, and give Prometheus the same.",
                id="gpufleet.W005",
            )
        )
    if str(settings.DEFAULT_SIGNING_KEY_DIR) == settings.GPUFLEET_SIGNING_KEY:
        problems.append(
            Warning(
                "GPUFLEET_SIGNING_KEY is not set: results are signed with a key generated on this machine.",
                hint="Point GPUFLEET_SIGNING_KEY at a managed Ed25519 key (a PEM file, or a directory for rotation).",
                id="gpufleet.W002",
            )
        )
    if settings.FABRIC_REDFISH_PASSWORD == settings.DEVELOPMENT_FABRIC_PASSWORD:
        problems.append(
            Warning(
                "GPUFLEET_FABRIC_REDFISH_PASSWORD is bmcsim's: the switch manager's real credential is not set.",
                hint="Set GPUFLEET_FABRIC_REDFISH_URL, _USERNAME and _PASSWORD to the fabric's switch manager.",
                id="gpufleet.W004",
            )
        )
    for fabric, setting in (("ethernet", "ETHERNET"), ("infiniband", "INFINIBAND"), ("nvlink", "NVLINK")):
        if getattr(settings, f"{setting}_MANAGER_URL") == settings.FABRIC_MANAGER_DEFAULT_URLS[fabric]:
            problems.append(
                Warning(
                    f"GPUFLEET_{setting}_MANAGER_URL is bmcsim's: tenants' {fabric} networks would be simulated.",
                    hint=f"Set GPUFLEET_{setting}_MANAGER_URL, _USERNAME and _PASSWORD to the fabric's manager.",
                    id="gpufleet.W006",
                )
            )
    return problems


@register(Tags.security, deploy=True)
def default_operator_password(app_configs, **kwargs):
    """An operator account that still opens with the demo's password is anyone's admin."""
    User = get_user_model()
    try:
        operators = list(
            User.objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True).values_list(
                User.USERNAME_FIELD, "password"
            )
        )
    except DatabaseError as exc:
        return [
            Info(
                f"The operators' passwords were not checked: the database cannot be read ({exc}).",
                hint="Run manage.py check --deploy where the database is reachable.",
                id="gpufleet.I001",
            )
        ]
    # hashers.check_password, not user.check_password: a check must not re-hash and save.
    weak = [name for name, encoded in operators if check_password(settings.DEMO_OPERATOR_PASSWORD, encoded)]
    if not weak:
        return []
    return [
        Warning(
            f"Operator account(s) {', '.join(sorted(weak))} log in with the demo's default password.",
            hint="Set a strong password (manage.py changepassword NAME), or deactivate the account.",
            id="gpufleet.W003",
        )
    ]


@register()
def shadow_rules_exist(app_configs, **kwargs):
    """A misspelt shadow rule would leave the rule it meant enforcing."""
    unknown = sorted(set(settings.REMEDIATION_SHADOW_RULES) - set(LADDERS))
    if not unknown:
        return []
    return [
        Error(
            f"GPUFLEET_REMEDIATION_SHADOW_RULES names no ladder: {', '.join(unknown)}.",
            hint=f"Ladders: {', '.join(LADDERS)}.",
            id="gpufleet.E001",
        )
    ]
