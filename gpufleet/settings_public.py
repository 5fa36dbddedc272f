"""Settings of the public listener (gunicorn gpufleet.wsgi_public, :8001), whole.

The internet-facing process holds nothing worth stealing: this module imports nothing of
gpufleet/settings.py and reads no secret of the control plane's. Not SECRET_KEY, not
DATABASE_URL, REDIS_URL, GPUFLEET_WEBHOOK_TOKEN, the fabric's credentials or the result-signing
keys. It reads the database as a role of its own that can SELECT only what the public routes
serve and write nothing (gpufleet/public_database, `manage.py grant_public_role`), and serves
the JWKS from a file of public keys that the control plane exports (`manage.py
export_signing_keys`). No sessions, logins, messages, CSRF cookies, login throttling or
metrics: the listener has no form, no user and no /metrics, and so writes nothing.
"""

import secrets

from gpufleet import environment
from gpufleet.settings_shared import *  # noqa: F403
from gpufleet.settings_shared import BASE_DIR, database

# Django wants a key, but nothing here signs anything that must outlive the process or be read by
# another (no sessions, no signed cookies, no password resets): a random key per process, never the
# control plane's SECRET_KEY, which signs its operators' and tenants' sessions.
SECRET_KEY = secrets.token_urlsafe(50)

# The apps whose models and templates the public routes read; auth and contenttypes for the
# models that refer to users. No admin, sessions, messages, tokens, axes or django_prometheus.
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_htmx",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "fleet",
    "attestation",
    "reservations",
    "remediation",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "gpufleet.middleware.RefuseUnstorableText",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "gpufleet.middleware.DomainErrorsAsStatuses",
]

ROOT_URLCONF = "gpufleet.urls_public"
# No one signs in here, through single sign-on or otherwise (console/pages/urls.py reads it).
OIDC_ENABLED = False
WSGI_APPLICATION = "gpufleet.wsgi_public.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    },
]

# The public role's login (`manage.py grant_public_role` creates the role): never DATABASE_URL,
# the control plane's owner login. The engine leaves out of whole rows the columns the role may
# not read. Timeouts as on the private listener.
DATABASES = {
    "default": database(
        "PUBLIC_DATABASE_URL",
        "postgres://gpufleet_public@127.0.0.1:5432/gpufleet",
        engine="gpufleet.public_database",
        # Read-only for every statement, whatever the role's grants (grant_public_role sets it on the role too).
        server_options="-c default_transaction_read_only=on",
    )
}

# The JWKS that GET /v1/attestation/keys serves and results are checked against: public keys
# only, written by `manage.py export_signing_keys FILE` where the private keys are. Read again
# whenever the file changes, so a rotation needs no restart.
PUBLIC_JWKS_FILE = environment.text("GPUFLEET_PUBLIC_JWKS_FILE", str(BASE_DIR / "var" / "public-jwks.json"))


# Anonymous reads only: no authentication (nothing looks a token or a user up), no throttle
# (they count tenants' requests), no body parser (no route takes one).
REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_THROTTLE_CLASSES": [],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "core.api.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
