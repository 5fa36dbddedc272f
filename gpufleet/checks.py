"""`manage.py check --deploy` also refuses our own development defaults in production."""

from django.conf import settings
from django.core.checks import Tags, Warning, register


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
    if str(settings.DEFAULT_SIGNING_KEY_DIR) == settings.GPUFLEET_SIGNING_KEY:
        problems.append(
            Warning(
                "GPUFLEET_SIGNING_KEY is not set: results are signed with a key generated on this machine.",
                hint="Point GPUFLEET_SIGNING_KEY at a managed Ed25519 key (a PEM file, or a directory for rotation).",
                id="gpufleet.W002",
            )
        )
    return problems
