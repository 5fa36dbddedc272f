"""Settings both listeners read: none of them a secret. gpufleet/settings.py (the control plane:
the private listener, workers, beat, commands) and gpufleet/settings_public.py (the public
listener, which must read no secret) each start from these."""

import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import dj_database_url

from gpufleet import environment

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = environment.boolean("GPUFLEET_DEBUG", False)
ALLOWED_HOSTS = environment.names("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")

# Production serves over TLS (terminated at a proxy that sets X-Forwarded-Proto):
# GPUFLEET_HTTPS=1 turns on what `manage.py check --deploy` asks for.
if environment.boolean("GPUFLEET_HTTPS", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # probes speak plain HTTP inside the cluster
    SECURE_HSTS_SECONDS = environment.integer("GPUFLEET_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# The VLAN every leaf port is on while its node serves no tenant: both listeners tell a node held
# until its removal from a tenant's network is read back (fleet.services.network_attachments).
PROVISIONING_VLAN = environment.integer("GPUFLEET_PROVISIONING_VLAN", 10, minimum=2, maximum=4094)

# Every connection gives up on a statement, a lock wait and an idle open transaction after these
# (0 turns one off): one stuck lock must not stop the reconcilers' single process for ever.
DB_STATEMENT_TIMEOUT_MS = environment.integer("GPUFLEET_DB_STATEMENT_TIMEOUT_MS", 30_000, minimum=0)
DB_LOCK_TIMEOUT_MS = environment.integer("GPUFLEET_DB_LOCK_TIMEOUT_MS", 10_000, minimum=0)
DB_IDLE_IN_TRANSACTION_TIMEOUT_MS = environment.integer("GPUFLEET_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 60_000, minimum=0)
DATABASE_CONNECT_TIMEOUT = environment.integer("DATABASE_CONNECT_TIMEOUT", 5, minimum=1)


_DATABASE_URL_FORM = (
    "a PostgreSQL URL, postgresql://user@host:port/name, or with several hosts"
    " postgresql://user@host1:port1,host2:port2/name?target_session_attrs=read-write"
)


def database(
    variable: str, default: str, *, engine: str | None = None, server_options: str = ""
) -> dj_database_url.DBConfig:
    """A DATABASES entry for the URL in `variable`: connections kept a minute and checked, with the
    timeouts above (and `server_options`, more `-c name=value` pairs) set on every connection. A URL
    it cannot use stops the process with one line, as gpufleet/environment.py's readers do."""
    url = environment.text(variable, default)
    try:
        entry = _parse_database_url(url, engine=engine)
    except ValueError as error:
        sys.exit(f"gpu-fleet: {variable}={_without_password(url)!r}: expected {_DATABASE_URL_FORM} ({error})")
    entry.setdefault("OPTIONS", {}).update(
        connect_timeout=DATABASE_CONNECT_TIMEOUT,
        options=(
            f"-c statement_timeout={DB_STATEMENT_TIMEOUT_MS} -c lock_timeout={DB_LOCK_TIMEOUT_MS}"
            f" -c idle_in_transaction_session_timeout={DB_IDLE_IN_TRANSACTION_TIMEOUT_MS} {server_options}"
        ).strip(),
    )
    return entry


def _parse_database_url(url: str, *, engine: str | None) -> dj_database_url.DBConfig:
    """dj_database_url's entry for `url`, which reads one host only. Several hosts (libpq's
    host1:port1,host2:port2, to fail over between a primary and its standbys) become HOST and PORT as
    libpq's comma lists, which Django hands psycopg as they are: it tries each host in turn, and
    keeps the first that `target_session_attrs` (a query parameter, in OPTIONS) accepts. A host
    without a port has an empty item in PORT, libpq's default port."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"the scheme {parts.scheme!r} is not postgres or postgresql")
    user, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True, engine=engine)
    names, ports = [], []
    for host in hosts.split(","):
        if not host:
            raise ValueError("an empty host in the list of hosts")
        one = urlsplit(f"//{host}")
        names.append(unquote(one.hostname or ""))
        ports.append(str(one.port or ""))  # ValueError for a port that is no number from 0 to 65535
    # The rest of the URL as dj_database_url reads it, with the first host alone.
    first = parts._replace(netloc=f"{user}{at}{hosts.split(',')[0]}").geturl()
    entry = dj_database_url.parse(first, conn_max_age=60, conn_health_checks=True, engine=engine)
    entry["HOST"], entry["PORT"] = ",".join(names), ",".join(ports)
    return entry


def _without_password(url: str) -> str:
    """`url` as a refusal may show it: any password in it starred out."""
    return re.sub(r"^([^:/]*://[^:@/]*):[^@/]*@", r"\1:***@", url)


DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# whitenoise serves static files from both listeners; from the apps' folders too until
# collectstatic has run, so a fresh checkout works without a build step.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

SPECTACULAR_SETTINGS = {
    "TITLE": "gpu-fleet API",
    "DESCRIPTION": "Reserve bare-metal GPU nodes by fabric topology; read the fleet, attestations and remediations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from local static files: no CDN on operators' control networks.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One name for the webhook event types, wherever a serializer lists them.
    "ENUM_NAME_OVERRIDES": {"WebhookEventEnum": "reservations.models.WebhookEvent"},
}
API_MAX_BODY_BYTES = environment.integer("GPUFLEET_API_MAX_BODY_BYTES", 256 * 1024, minimum=1)

# Reservations (reservations/periods.py): how far ahead one may start and how long it may last;
# one that starts now without ends_at lasts the maximum, unless released before.
BOOKING_HORIZON_DAYS = environment.number("GPUFLEET_BOOKING_HORIZON_DAYS", 90, positive=True)
MAX_RESERVATION_DAYS = environment.number("GPUFLEET_MAX_RESERVATION_DAYS", 30, positive=True)
# GET /v1/capacity is kept per process until the fleet changes, but "free now" also moves with the
# clock alone (a hold starts or ends): a kept answer is computed again once this old.
CAPACITY_MAX_AGE_SECONDS = environment.number("GPUFLEET_CAPACITY_MAX_AGE_SECONDS", 5)

# The nodes automatic remediation acts on (any rung) are capped per window, fleet-wide and per pod
# (the remediations page shows the cap too).
REMEDIATION_CAP = environment.integer("GPUFLEET_REMEDIATION_CAP", 5, minimum=0)
REMEDIATION_POD_CAP = environment.integer("GPUFLEET_REMEDIATION_POD_CAP", 3, minimum=0)
REMEDIATION_WINDOW_SECONDS = environment.number("GPUFLEET_REMEDIATION_WINDOW_SECONDS", 600, positive=True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {
        "handlers": ["console"],
        "level": environment.choice("GPUFLEET_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    },
}
