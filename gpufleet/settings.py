"""Settings for gpu-fleet, read from the environment; every variable has a working default."""

import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from core import redis_connection
from fleet import segments
from gpufleet import environment
from gpufleet.oidc_discovery import oidc_provider_settings
from gpufleet.settings_fabrics import *  # noqa: F403
from gpufleet.settings_fabrics import FABRIC_POLL_SECONDS, FABRIC_SYNC_SECONDS
from gpufleet.settings_shared import *  # noqa: F403
from gpufleet.settings_shared import BASE_DIR, database

# A development key keeps `make demo` working out of the box; production sets SECRET_KEY.
SECRET_KEY = environment.text("SECRET_KEY", "django-insecure-gpufleet-development-key-set-SECRET_KEY-in-production")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_prometheus",
    "django_htmx",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "django_filters",
    "gpufleet",
    # From the bottom up (docs/architecture.md): each imports only those above it in this list.
    "fleet",
    "attestation",
    "reservations",
    "remediation",
    "workflows",
    "console",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the session, the user or the database (both listeners).
    "gpufleet.middleware.RefuseUnstorableText",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "gpufleet.middleware.WhoActs",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "gpufleet.middleware.DomainErrorsAsStatuses",
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "gpufleet.urls"
WSGI_APPLICATION = "gpufleet.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpufleet")}

REDIS_URL = environment.text("REDIS_URL", "redis://127.0.0.1:6379/0")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# Login throttling (django-axes) on the admin's and the tenants' login pages: after
# GPUFLEET_LOGIN_FAILURE_LIMIT failures for one username from one address, that pair is refused
# (429) for GPUFLEET_LOGIN_COOLOFF_SECONDS. Attempts are kept in the database, so every web
# worker counts the same ones. axes needs the request in authenticate(): tests log in with
# force_login, or client.login(request=HttpRequest(), ...). The demo's default operator
# password is what check --deploy looks for.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = environment.integer("GPUFLEET_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=environment.number("GPUFLEET_LOGIN_COOLOFF_SECONDS", 900))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Its start-up banner and per-attempt INFO lines in every process; failures are still logged.
AXES_VERBOSE = False
# Behind TLS proxies (deploy/README.md, "Behind a TLS proxy") every request comes from a proxy's
# address: GPUFLEET_TRUSTED_PROXY_COUNT says how many stand in front, each appending the address it
# was reached from to X-Forwarded-For, and attempts are keyed on the address the outermost one saw
# (gpufleet/client_address.py). 0, the default: the connection's own address, the header ignored.
TRUSTED_PROXY_COUNT = environment.integer("GPUFLEET_TRUSTED_PROXY_COUNT", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "gpufleet.client_address.client_address"
DEMO_OPERATOR_PASSWORD = "admin"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/my/reservations"

# Single sign-on through OpenID Connect (mozilla-django-oidc; reservations/oidc.py), next to the
# passwords, for the tenants' pages and the operators' admin. Off while GPUFLEET_OIDC_ISSUER is
# empty: no backend, no /oidc/ routes, the login page as without. Set, the provider's endpoints are
# read from <issuer>/.well-known/openid-configuration as each process starts (a provider that does
# not answer stops it, naming the variable). A person is the user oidc-<sub>; their roles claim
# (GPUFLEET_OIDC_ROLES_CLAIM) lists <organisation>:<role> entries, which become their memberships
# at every sign-in (GPUFLEET_OIDC_OPERATOR_ROLE an operator, and entries
# GPUFLEET_OIDC_ADMIN_GROUP_PREFIX<group> the admin's groups of that name, as staff). SessionRefresh
# (gpufleet/oidc_refresh.py, which sends htmx's polls there too) signs them in again, silently
# (prompt=none), once GPUFLEET_OIDC_RENEW_SECONDS have passed since the last time: a role taken
# away at the provider is gone by then.
OIDC_ISSUER = environment.text("GPUFLEET_OIDC_ISSUER", "").rstrip("/")
OIDC_ENABLED = bool(OIDC_ISSUER)
OIDC_RP_CLIENT_ID = environment.text("GPUFLEET_OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = environment.text("GPUFLEET_OIDC_CLIENT_SECRET", "")
OIDC_RP_SCOPES = environment.text("GPUFLEET_OIDC_SCOPES", "openid email")
OIDC_ROLES_CLAIM = environment.text("GPUFLEET_OIDC_ROLES_CLAIM", "groups")
OIDC_OPERATOR_ROLE = environment.text("GPUFLEET_OIDC_OPERATOR_ROLE", "gpufleet:operator")
OIDC_ADMIN_GROUP_PREFIX = environment.text("GPUFLEET_OIDC_ADMIN_GROUP_PREFIX", "gpufleet:group:")
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = environment.number("GPUFLEET_OIDC_RENEW_SECONDS", 900, positive=True)
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
LOGIN_REDIRECT_URL_FAILURE = LOGIN_URL
OIDC_AUTHENTICATION_BACKEND = "reservations.oidc.RolesClaimBackend"
OIDC_MIDDLEWARE = "gpufleet.oidc_refresh.HtmxAwareSessionRefresh"


if OIDC_ENABLED:
    if not (OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET):
        sys.exit("gpu-fleet: GPUFLEET_OIDC_ISSUER is set: expected GPUFLEET_OIDC_CLIENT_ID and _CLIENT_SECRET too")
    _provider = oidc_provider_settings(OIDC_ISSUER, timeout=OIDC_TIMEOUT)
    OIDC_OP_AUTHORIZATION_ENDPOINT = _provider["OIDC_OP_AUTHORIZATION_ENDPOINT"]
    OIDC_OP_TOKEN_ENDPOINT = _provider["OIDC_OP_TOKEN_ENDPOINT"]
    OIDC_OP_USER_ENDPOINT = _provider["OIDC_OP_USER_ENDPOINT"]
    OIDC_OP_JWKS_ENDPOINT = _provider["OIDC_OP_JWKS_ENDPOINT"]
    OIDC_RP_SIGN_ALGO = _provider["OIDC_RP_SIGN_ALGO"]
    AUTHENTICATION_BACKENDS.append(OIDC_AUTHENTICATION_BACKEND)
    # Right after the user is known, before anything reads it.
    MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1, OIDC_MIDDLEWARE)

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.SizeLimitedJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["reservations.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "core.api.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # Per tenant, counted in the shared cache (CACHES): every web worker and replica sees one count.
    "DEFAULT_THROTTLE_CLASSES": [
        "reservations.api.throttles.TenantReadThrottle",
        "reservations.api.throttles.TenantWriteThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "tenant_reads": environment.rate("GPUFLEET_API_READ_RATE", "600/min"),
        "tenant_writes": environment.rate("GPUFLEET_API_WRITE_RATE", "120/min"),
    },
}

# Redis through Sentinel (core/redis_connection.py): REDIS_URL sentinel://host:port;sentinel://host:port/0.
REDIS_SENTINEL_MASTER = environment.text("GPUFLEET_REDIS_SENTINEL_MASTER", "")
REDIS_SENTINEL_PASSWORD = environment.text("GPUFLEET_REDIS_SENTINEL_PASSWORD", "")
if problem := redis_connection.url_problem(REDIS_URL, REDIS_SENTINEL_MASTER):
    sys.exit(f"gpu-fleet: {problem}")

# Django's cache in Redis, shared by every web process: the API's per-tenant throttles count
# there. Short socket timeouts: with Redis down a request waits a moment, then is let through.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": [REDIS_URL],  # one server, behind Sentinels too: Django splits a string at ';'
        "KEY_PREFIX": DATABASES["default"]["NAME"],  # control planes that share a Redis count apart
        "OPTIONS": {
            "pool_class": "core.redis_connection.CachePool",
            "socket_connect_timeout": 0.5,
            "socket_timeout": 0.5,
        },
    }
}

# Celery: Redis is the broker; results are not kept (the database records every outcome).
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message for another
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 2, "socket_timeout": 5}
if redis_connection.sentinel_url(REDIS_URL):
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "master_name": REDIS_SENTINEL_MASTER,
        "sentinel_kwargs": redis_connection.sentinel_options(CELERY_BROKER_TRANSPORT_OPTIONS, REDIS_SENTINEL_PASSWORD),
    }
# Publishing gives up fast: the reconciler enqueues again whatever a lost message was for.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
# Any number of beats may run: one schedules, the others stand by (gpufleet/beat_leadership.py).
CELERY_BEAT_SCHEDULER = "gpufleet.beat_leadership:LeaderScheduler"
# Workers and beat touch it from their loops, for liveness probes (gpufleet/heartbeat.py). Unset: none.
HEARTBEAT_FILE = environment.text("GPUFLEET_HEARTBEAT_FILE", "")
RECONCILE_SECONDS = environment.number("GPUFLEET_RECONCILE_SECONDS", 5, positive=True)
# A sweep on the workers' queue waits behind the workflow runs there: it must outlive a backlog, or
# a busy fleet discards every sweep before a worker takes it. Each sweep claims its rows in the
# database, so a late one does nothing twice; the limit only keeps messages from piling up while no
# worker runs.
WORKER_SWEEP_EXPIRES = max(60.0, RECONCILE_SECONDS)
# The reconcilers have a queue of their own, consumed by the beat process itself: workers busy
# with long workflows must never starve the safety net that re-sends lost work.
CELERY_TASK_ROUTES = {
    "workflows.tasks.reconcile_nodes": {"queue": "reconcile"},
    "workflows.tasks.reconcile_reservations": {"queue": "reconcile"},
    "workflows.tasks.reconcile_remediations": {"queue": "reconcile"},
    "workflows.tasks.reconcile_power_actions": {"queue": "reconcile"},
    "workflows.tasks.reconcile_idle_diagnostics": {"queue": "reconcile"},
    "workflows.tasks.advance_firmware_rollouts": {"queue": "reconcile"},
    # Tenants' receivers answer as slowly as they like (up to OUTBOUND_DEADLINE_SECONDS a send):
    # their deliveries have a queue and a worker pool of their own (the Procfile's `webhooks`), so
    # they never hold a worker that provisions, wipes or repairs nodes.
    "workflows.tasks.deliver_webhooks": {"queue": "webhooks"},
}
CELERY_BEAT_SCHEDULE = {
    "reconcile-nodes": {
        "task": "workflows.tasks.reconcile_nodes",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    "reconcile-reservations": {
        "task": "workflows.tasks.reconcile_reservations",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    "reconcile-remediations": {
        "task": "workflows.tasks.reconcile_remediations",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    "reconcile-power-actions": {
        "task": "workflows.tasks.reconcile_power_actions",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    "reconcile-idle-diagnostics": {
        "task": "workflows.tasks.reconcile_idle_diagnostics",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    "advance-firmware-rollouts": {
        "task": "workflows.tasks.advance_firmware_rollouts",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": RECONCILE_SECONDS},
    },
    # On the workers' queue: a slow receiver must not hold the reconcilers.
    "deliver-webhooks": {
        "task": "workflows.tasks.deliver_webhooks",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": WORKER_SWEEP_EXPIRES},
    },
    # On the workers' queue too: a BMC that hangs must not hold the reconcilers. Each node's log is
    # read every SEL_POLL_SECONDS; the sweep takes those that are due.
    "read-bmc-event-logs": {
        "task": "workflows.tasks.read_bmc_event_logs",
        "schedule": RECONCILE_SECONDS,
        "options": {"expires": WORKER_SWEEP_EXPIRES},
    },
    # And the switch manager's, which may hang as a BMC may.
    "read-fabric-health": {
        "task": "workflows.tasks.read_fabric_health",
        "schedule": FABRIC_POLL_SECONDS,
        "options": {"expires": WORKER_SWEEP_EXPIRES},
    },
    # Every attachment read back from the fabrics' managers, which may hang as a BMC may: drift.
    "sync-fabrics": {
        "task": "workflows.tasks.sync_fabrics",
        "schedule": FABRIC_SYNC_SECONDS,
        "kwargs": {"full": True},
        "options": {"expires": WORKER_SWEEP_EXPIRES},
    },
    # On the workers' queue: a long backlog of old rows must not hold the reconcilers (RETAIN_*).
    "delete-old-rows": {
        "task": "workflows.tasks.delete_old_rows",
        "schedule": 3600,
        "options": {"expires": 3600},
    },
}

# How long a worker's claim on a node lasts without a heartbeat.
LEASE_SECONDS = environment.number("GPUFLEET_LEASE_SECONDS", 60, positive=True)

# Remediation: Alertmanager authenticates with this bearer token (its config reads it from a file).
DEVELOPMENT_WEBHOOK_TOKEN = "gpufleet-development-webhook-token"
GPUFLEET_WEBHOOK_TOKEN = environment.text("GPUFLEET_WEBHOOK_TOKEN", DEVELOPMENT_WEBHOOK_TOKEN)
# Prometheus sends this bearer token (its config reads it from a file) to read the scrape targets
# (/v1/prometheus/targets), /metrics and /metrics/fleet; it opens nothing else.
DEVELOPMENT_PROMETHEUS_TOKEN = "gpufleet-development-prometheus-token"
GPUFLEET_PROMETHEUS_TOKEN = environment.text("GPUFLEET_PROMETHEUS_TOKEN", DEVELOPMENT_PROMETHEUS_TOKEN)
# A repair's message lost (with Redis, or expired in a backlog) is sent again after this.
REMEDIATION_RECHECK_SECONDS = environment.number("GPUFLEET_REMEDIATION_RECHECK_SECONDS", 30, positive=True)
# How often a GPU reset under way is looked at, and how long it may take before it counts as failed.
REMEDIATION_RESET_POLL_SECONDS = environment.number("GPUFLEET_REMEDIATION_RESET_POLL_SECONDS", 1, positive=True)
REMEDIATION_RESET_TIMEOUT_SECONDS = environment.number("GPUFLEET_REMEDIATION_RESET_TIMEOUT_SECONDS", 60, positive=True)
# How long a reboot or power cycle may take to bring the node's agent back: a server with eight
# GPUs can take ten minutes to pass its firmware's checks.
REMEDIATION_REBOOT_TIMEOUT_SECONDS = environment.number(
    "GPUFLEET_REMEDIATION_REBOOT_TIMEOUT_SECONDS", 900, positive=True
)
# Ladders (remediation.rules.LADDERS) that only record what they would do: comma-separated names.
REMEDIATION_SHADOW_RULES = environment.names("GPUFLEET_REMEDIATION_SHADOW_RULES")
ALERT_MAX_BODY_BYTES = environment.integer("GPUFLEET_ALERT_MAX_BODY_BYTES", 1024 * 1024, minimum=1)
# BMC event logs (workflows/bmc_event_logs.py), a fault source under the same rules and cap: each
# managed node's SEL is read for new entries every SEL_POLL_SECONDS, SEL_READ_CONCURRENCY (1 or more)
# BMCs at a time.
SEL_POLL_SECONDS = environment.number("GPUFLEET_SEL_POLL_SECONDS", 30, positive=True)
SEL_READ_CONCURRENCY = environment.integer("GPUFLEET_SEL_READ_CONCURRENCY", 16, minimum=1)

# Attestation: result-signing keys (a PEM file, or a directory of them: the newest signs, the
# older stay in the JWKS), and the policy used when no policy in the database fits a node.
DEFAULT_SIGNING_KEY_DIR = BASE_DIR / "var" / "signing-keys"
GPUFLEET_SIGNING_KEY = environment.text("GPUFLEET_SIGNING_KEY", str(DEFAULT_SIGNING_KEY_DIR))
ATTESTATION_POLICY_FILE = environment.text(
    "GPUFLEET_ATTESTATION_POLICY", str(BASE_DIR / "attestation" / "policies" / "default.toml")
)
# OCSP answers for the GPUs' chains: a worker asks for one where none current is kept, of the
# responder a certificate names (or this one, a mirror, anywhere); off where none can be reached.
GPUFLEET_OCSP_FETCH = environment.boolean("GPUFLEET_OCSP_FETCH", True)
GPUFLEET_OCSP_RESPONDER = environment.text("GPUFLEET_OCSP_RESPONDER", "")

# Workflows (workflows/node_workflows/). Timeouts are in real seconds: bmcsim scales its own durations.
SERVICE_IMAGE_URL = environment.text("GPUFLEET_SERVICE_IMAGE_URL", "http://images.gpufleet.internal/service.iso")
TENANT_IMAGE_URL = environment.text("GPUFLEET_TENANT_IMAGE_URL", "http://images.gpufleet.internal/tenant.iso")
# A tenant may report at most this many nodes broken a day: each report costs a node of the fleet.
TENANT_REPORTS_PER_DAY = environment.integer("GPUFLEET_TENANT_REPORTS_PER_DAY", 5, minimum=0)
# Tenants' power actions on their nodes: at most this many per node an hour, and a reboot the OS
# does not carry out gracefully within the grace is forced.
TENANT_POWER_ACTIONS_PER_HOUR = environment.integer("GPUFLEET_TENANT_POWER_ACTIONS_PER_HOUR", 6, minimum=0)
TENANT_REBOOT_GRACE_SECONDS = environment.number("GPUFLEET_TENANT_REBOOT_GRACE_SECONDS", 120)
# Tenants' webhooks go to public addresses only, and to these networks (comma-separated CIDRs).
WEBHOOK_ALLOWED_NETWORKS = list(environment.networks("GPUFLEET_WEBHOOK_ALLOWED_NETWORKS"))
# Every outbound HTTP call (webhooks, BMCs, agents, the fabric's manager, image checks) ends
# within this many seconds however its answer trickles in, and reads at most this many bytes of it.
OUTBOUND_DEADLINE_SECONDS = environment.number("GPUFLEET_OUTBOUND_DEADLINE_SECONDS", 30, positive=True)
OUTBOUND_MAX_BODY_BYTES = environment.integer("GPUFLEET_OUTBOUND_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024)
# Faults a tenant's own node says of itself during its tenancy (agent XID reports, SEL entries its
# OS can write, reports of a broken node) that the tenant may spend in the cap's window: they never
# spend the fleet-wide or per-pod cap that protects other tenants.
TENANT_FAULT_BUDGET = environment.integer("GPUFLEET_TENANT_FAULT_BUDGET", 3, minimum=0)
# XID reports a node's agent may send (POST /v1/agents/{node}/xids), per node: over it, 429 with
# Retry-After, which the agent waits out and retries (an honest agent sends one report at a time).
AGENT_XID_REPORT_RATE = environment.rate("GPUFLEET_AGENT_XID_REPORT_RATE", "60/min")
# Before a reservation's end, its tenant is told this many minutes ahead (reservation.ending).
# A worker that claimed a tenant's webhook delivery and died: how long until another sends it.
WEBHOOK_SEND_LEASE_SECONDS = environment.number("GPUFLEET_WEBHOOK_SEND_LEASE_SECONDS", 60, positive=True)
RESERVATION_ENDING_NOTICE_MINUTES = environment.number("GPUFLEET_RESERVATION_ENDING_NOTICE_MINUTES", 60)
# Where BMCs fetch config drives: this private listener, as the BMC network reaches it.
CONFIG_DRIVE_BASE_URL = environment.text("GPUFLEET_CONFIG_DRIVE_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
BMC_TIMEOUT = environment.number("GPUFLEET_BMC_TIMEOUT", 10, positive=True)
# A BMC that advertises $expand is asked for collections with their members inline; off (0), every
# member is read on its own, for BMCs whose $expand answers are wrong or slow.
BMC_EXPAND = environment.boolean("GPUFLEET_BMC_EXPAND", True)
WORKFLOW_POLL_SECONDS = environment.number("GPUFLEET_WORKFLOW_POLL_SECONDS", 1, positive=True)
# Hung or slow hardware must not hold a worker: a wait longer than this parks the node, and the
# reconciler sends it again after a quarter of the time waited so far, at most the maximum.
WORKFLOW_HOLD_SECONDS = environment.number("GPUFLEET_WORKFLOW_HOLD_SECONDS", 10, positive=True)
WORKFLOW_RECHECK_MAX_SECONDS = environment.number("GPUFLEET_WORKFLOW_RECHECK_MAX_SECONDS", 60, positive=True)
AGENT_BOOT_TIMEOUT = environment.number("GPUFLEET_AGENT_BOOT_TIMEOUT", 600, positive=True)
WIPE_TIMEOUT = environment.number("GPUFLEET_WIPE_TIMEOUT", 3600, positive=True)
# Firmware baselines (fleet/firmware.py): where BMCs fetch the images a repair flashes (a baseline
# names each image's file), and how long the BMCs' update tasks may take together.
FIRMWARE_IMAGE_BASE_URL = environment.text(
    "GPUFLEET_FIRMWARE_IMAGE_BASE_URL", "http://images.gpufleet.internal/firmware"
).rstrip("/")
FIRMWARE_UPDATE_TIMEOUT = environment.number("GPUFLEET_FIRMWARE_UPDATE_TIMEOUT", 1800, positive=True)
# How long a node may stay in a state that owes work, every retry included, before it fails.
INSPECTION_DEADLINE = environment.number("GPUFLEET_INSPECTION_DEADLINE", 3600, positive=True)
PROVISION_DEADLINE = environment.number("GPUFLEET_PROVISION_DEADLINE", 3600, positive=True)
WIPE_DEADLINE = environment.number("GPUFLEET_WIPE_DEADLINE", 7200, positive=True)
# Messages that wait longer than this are dropped: the reconciler enqueues the work again.
WORKFLOW_MESSAGE_EXPIRES = environment.number("GPUFLEET_WORKFLOW_MESSAGE_EXPIRES", 300, positive=True)

# Diagnostics (fleet/diagnostics.py): a short run at every inspection, a long one as burn-in after
# quarantine or maintenance, and long ones on idle available nodes (workflows/idle_diagnostics.py),
# at most IDLE_DIAGNOSTICS_AT_ONCE at a time (0: none), looked at every poll period and preempted
# when placement wants the node. A run may take DIAGNOSTICS_TIMEOUT (DCGM's level 3 takes about 15
# minutes); a long pass counts as recent, preferred by placement, for DIAGNOSTICS_RECENT_DAYS; a node
# whose idle run ended without one is not asked again before IDLE_DIAGNOSTICS_RETRY_SECONDS.
DIAGNOSTICS_TIMEOUT = environment.number("GPUFLEET_DIAGNOSTICS_TIMEOUT", 3600, positive=True)
DIAGNOSTICS_RECENT_DAYS = environment.number("GPUFLEET_DIAGNOSTICS_RECENT_DAYS", 7)
IDLE_DIAGNOSTICS_AT_ONCE = environment.integer("GPUFLEET_IDLE_DIAGNOSTICS_AT_ONCE", 4, minimum=0)
IDLE_DIAGNOSTICS_POLL_SECONDS = environment.number("GPUFLEET_IDLE_DIAGNOSTICS_POLL_SECONDS", 30, positive=True)
IDLE_DIAGNOSTICS_RETRY_SECONDS = environment.number("GPUFLEET_IDLE_DIAGNOSTICS_RETRY_SECONDS", 3600, positive=True)


# Tenants' networks (fleet/services/tenant_networks.py): each reservation gets an Ethernet segment
# (VLANs, or VXLAN VNIs with a VLAN each on the leaf ports), a subnet of the tenant address space
# (IPv4: a /24 at least, room for twice its nodes) and an InfiniBand P_Key per fabric. The segment
# and P_Key ranges are where the pools start: operators edit them in the admin (SegmentPool).
def _refuse_unless(name: str, raw: str, parse: Callable[[str], Any]) -> Any:
    """`parse(raw)`; a ValueError stops the process as the environment's readers do, naming the variable."""
    try:
        return parse(raw)
    except ValueError as expected:
        sys.exit(f"gpu-fleet: {name}={raw!r}: expected {expected}")


ETHERNET_SEGMENTS: tuple[str, int, int] = _refuse_unless(  # (kind, first, last)
    "GPUFLEET_ETHERNET_SEGMENTS",
    environment.text("GPUFLEET_ETHERNET_SEGMENTS", "vlan:1000-3999"),
    segments.parse_ethernet_segments,
)
INFINIBAND_PKEYS: tuple[int, int] = _refuse_unless(
    "GPUFLEET_INFINIBAND_PKEYS",
    environment.text("GPUFLEET_INFINIBAND_PKEYS", "0x1000-0x7ffe"),
    lambda raw: segments.parse_range(raw, "pkey"),
)
TENANT_SUBNETS = environment.networks("GPUFLEET_TENANT_SUBNETS", "10.128.0.0/9")
if any(network.version != 4 for network in TENANT_SUBNETS) or not TENANT_SUBNETS:
    sys.exit(f"gpu-fleet: GPUFLEET_TENANT_SUBNETS={','.join(map(str, TENANT_SUBNETS))!r}: expected IPv4 networks")

# BMC access (fleet/bmc_access.py): BMC and node-agent URLs must resolve into these networks
# (comma-separated CIDRs), wherever they come in and before a worker connects, so a changed
# address cannot send a BMC's password, or any request, elsewhere.
BMC_NETWORKS = environment.networks(
    "GPUFLEET_BMC_NETWORKS", "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
)

# Retention (workflows/retention.py): every hour a sweep on the workers' queue deletes, a thousand
# rows per transaction, the rows of the tables that only grow once they are older than these many
# days: webhook deliveries sent or given up, remediations with their incident timelines (at least
# 30 days: the remediations page's figures look back that far), attestation results, ended idle
# diagnostics runs, and django-axes' login attempts and logs. What is still in use stays whatever
# its age (a pending delivery, a repair still climbing or counted by the cap, each node's latest
# attestation result, a lockout cooling off); expired sessions go at once. The append-only audit
# tables (fleet's audit events, the reservations' history) keep everything: docs/architecture.md.
RETAIN_WEBHOOK_DELIVERIES_DAYS = environment.integer("GPUFLEET_RETAIN_WEBHOOK_DELIVERIES_DAYS", 30, minimum=1)
RETAIN_REMEDIATIONS_DAYS = environment.integer("GPUFLEET_RETAIN_REMEDIATIONS_DAYS", 365, minimum=30)
RETAIN_ATTESTATION_RESULTS_DAYS = environment.integer("GPUFLEET_RETAIN_ATTESTATION_RESULTS_DAYS", 90, minimum=1)
RETAIN_IDLE_DIAGNOSTIC_RUNS_DAYS = environment.integer("GPUFLEET_RETAIN_IDLE_DIAGNOSTIC_RUNS_DAYS", 30, minimum=1)
RETAIN_POWER_ACTIONS_DAYS = environment.integer("GPUFLEET_RETAIN_POWER_ACTIONS_DAYS", 30, minimum=1)
RETAIN_NODE_CREDENTIALS_DAYS = environment.integer("GPUFLEET_RETAIN_NODE_CREDENTIALS_DAYS", 30, minimum=1)
RETAIN_LOGIN_ATTEMPTS_DAYS = environment.integer("GPUFLEET_RETAIN_LOGIN_ATTEMPTS_DAYS", 90, minimum=1)

# Every task is stopped when it runs past its time: at the soft limit SoftTimeLimitExceeded is
# raised in it (what it had claimed in the database comes due again when its lease runs out), and
# the hard limit kills its process. The default is for tasks that only touch the database; those
# that call out are sized from the calls they make. The beat process's solo pool enforces none:
# its reconcilers are database sweeps in bounded batches, under the database's statement timeout.
# (Here, after the settings that size them.)
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90


def _time_limits(soft: float) -> dict[str, float]:
    return {"soft_time_limit": soft, "time_limit": soft + 30}


# A node's workflow run waits at most WORKFLOW_HOLD_SECONDS, then parks the node; a few BMC and
# agent calls, each retried, come on top. A batch of webhook deliveries sends until the limit
# stops it; the delivery it was sending is sent again once its lease runs out.
_NODE_WORK = _time_limits(max(300.0, WORKFLOW_HOLD_SECONDS + 20 * BMC_TIMEOUT))
CELERY_TASK_ANNOTATIONS = {
    "workflows.tasks.run_workflow": _NODE_WORK,
    "workflows.tasks.power_action": _NODE_WORK,
    "workflows.tasks.force_restart_if_stuck": _NODE_WORK,
    "workflows.tasks.repair_gpu": _NODE_WORK,
    "workflows.tasks.look_at_idle_diagnostics": _NODE_WORK,
    "workflows.tasks.read_bmc_event_logs": _NODE_WORK,
    "workflows.tasks.read_fabric_health": _NODE_WORK,
    "workflows.tasks.sync_fabrics": _NODE_WORK,
    "workflows.tasks.deliver_webhooks": _time_limits(max(120.0, 4 * OUTBOUND_DEADLINE_SECONDS)),
    # Its batches commit one by one: a sweep stopped at its limit has lost nothing, the next goes on.
    "workflows.tasks.delete_old_rows": _time_limits(600.0),
}
