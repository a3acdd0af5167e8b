"""Django settings, read from the environment only (see ``.env.example``).

Development and production differ by environment alone: ``CACHEPLANE_ENV=production``
makes the secret key, database, Redis and allowed hosts mandatory and turns on the
transport-security settings that ``manage.py check --deploy`` expects.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from controlplane.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
    parse_database_url,
    parse_redis_url,
    parse_with,
)

BASE_DIR = Path(__file__).resolve().parent.parent


CACHEPLANE_ENV = env_choice("CACHEPLANE_ENV", "development", ("development", "production"))
PRODUCTION = CACHEPLANE_ENV == "production"

_DEV_SECRET = "dev-insecure-cacheplane-secret-key-change-me-in-production-0123456789"
SECRET_KEY = env_str(
    "CACHEPLANE_SECRET_KEY", None if PRODUCTION else _DEV_SECRET, required=PRODUCTION
)
if PRODUCTION and len(SECRET_KEY or "") < 50:
    raise ConfigError("CACHEPLANE_SECRET_KEY", "must be at least 50 characters in production")
DEBUG = env_bool("CACHEPLANE_DEBUG", False)

ALLOWED_HOSTS = env_list(
    "CACHEPLANE_ALLOWED_HOSTS",
    [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"],
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise ConfigError("CACHEPLANE_ALLOWED_HOSTS", "is required in production")
CSRF_TRUSTED_ORIGINS = env_list("CACHEPLANE_CSRF_TRUSTED_ORIGINS", [])

# --- Services -------------------------------------------------------------------------
_database_url = env_str("DATABASE_URL")
if _database_url is None:
    raise ConfigError(
        "DATABASE_URL",
        "is not set (use `cacheplane up`, which starts an embedded PostgreSQL, or set it)",
    )
DATABASES = {"default": parse_database_url("DATABASE_URL", _database_url)}
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["TEST"] = {"NAME": env_str("CACHEPLANE_TEST_DATABASE_NAME", None)}
# Connection pooling (psycopg_pool through Django's native "pool" option). Under ASGI every
# request may run on a different thread and each thread would otherwise keep its own
# persistent connection (CONN_MAX_AGE), so connections grow with threads until PostgreSQL
# refuses clients. With the pool a connection goes back to it when the request (or
# database_sync_to_async call) ends, and one process never holds more than MAX_SIZE.
# Size it so that (web processes x MAX_SIZE) + (Celery concurrency x MIN_SIZE, a worker
# child uses one at a time) stays below PostgreSQL's max_connections minus admin slack.
# The pool requires CONN_MAX_AGE = 0 (Django refuses persistent connections with it).
# Names this process's connections in pg_stat_activity (`cacheplane up` sets one per
# child: cacheplane-web, cacheplane-celery-worker, ...), so each pool can be watched.
DATABASES["default"]["OPTIONS"].setdefault(
    "application_name", env_str("CACHEPLANE_DB_APPLICATION_NAME", "cacheplane") or "cacheplane"
)
CACHEPLANE_DB_POOL = env_bool("CACHEPLANE_DB_POOL", True)
if CACHEPLANE_DB_POOL:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # With the pool, CONN_HEALTH_CHECKS makes psycopg_pool check each connection on
    # checkout: one PostgreSQL dropped while it sat idle is replaced, not handed out.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": env_int("CACHEPLANE_DB_POOL_MIN_SIZE", 1, minimum=0),
        "max_size": env_int("CACHEPLANE_DB_POOL_MAX_SIZE", 20, minimum=1),
        # Seconds a request waits for a free connection before failing (then 503 at
        # /readyz, an error elsewhere) instead of queueing without bound.
        "timeout": env_float("CACHEPLANE_DB_POOL_TIMEOUT", 10.0, minimum=0.1),
        # Idle connections above min_size are closed after this many seconds.
        "max_idle": env_float("CACHEPLANE_DB_POOL_MAX_IDLE", 300.0, minimum=1.0),
    }
    if (
        DATABASES["default"]["OPTIONS"]["pool"]["min_size"]
        > (DATABASES["default"]["OPTIONS"]["pool"]["max_size"])
    ):
        raise ConfigError(
            "CACHEPLANE_DB_POOL_MIN_SIZE", "must not exceed CACHEPLANE_DB_POOL_MAX_SIZE"
        )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("CACHEPLANE_DB_CONN_MAX_AGE", 60, minimum=0)
# Migrations run as the role that owns the tables; the application's role does not own
# them and cannot change the audit tables (controlplane/dbroles.py, README "Production
# shape"). `cacheplane manage migrate` uses this alias when the variable is set.
_database_migrate_url = env_str("DATABASE_MIGRATE_URL")
if _database_migrate_url:
    DATABASES["migrate"] = parse_database_url("DATABASE_MIGRATE_URL", _database_migrate_url)
    DATABASES["migrate"]["CONN_MAX_AGE"] = 0
    DATABASES["migrate"]["TEST"] = {"MIRROR": "default"}

_redis_url = env_str("REDIS_URL")
if _redis_url is None:
    raise ConfigError(
        "REDIS_URL", "is not set (use `cacheplane up`, which starts an embedded Redis, or set it)"
    )
REDIS_URL = parse_redis_url("REDIS_URL", _redis_url)

# --- Applications ---------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "django_prometheus",
    "axes",
    "tenants",
    "audit",
    "caches",
    "billing",
    "workers",
    "gateway",
    "frontend",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "controlplane.middleware.RequestIdMiddleware",
    "controlplane.middleware.BodySizeLimitMiddleware",
    "controlplane.api.middleware.QueryStringCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Last, as django-axes asks: turns a flagged login into the lockout response.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp 4.x dict format): no inline script or style and no
# eval anywhere; the console loads only its own static files. Owned by the console (see
# frontend/); a violation shows in the browser console, which the browser tests fail on.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
AUTH_USER_MODEL = "tenants.Principal"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Front-end packages come from the npm registry (package.json) and are served straight
# from node_modules: nothing is copied into the repository. `cacheplane up` and the test
# suite run `npm ci` when node_modules is missing (controlplane/assets.py).
NODE_MODULES = BASE_DIR / "node_modules"
STATICFILES_DIRS = [
    ("vendor/chart.js", NODE_MODULES / "chart.js" / "dist"),
    ("vendor/htmx", NODE_MODULES / "htmx.org" / "dist"),
    ("vendor/chartjs-adapter-date-fns", NODE_MODULES / "chartjs-adapter-date-fns" / "dist"),
]
# Serve through finders (no collectstatic step) unless a collected STATIC_ROOT is used.
WHITENOISE_USE_FINDERS = env_bool("CACHEPLANE_STATIC_FROM_FINDERS", True)
WHITENOISE_AUTOREFRESH = False
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("CACHEPLANE_MAX_BODY_BYTES", 2_621_440, minimum=1024)

# --- Security -------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("CACHEPLANE_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_SSL_REDIRECT = env_bool("CACHEPLANE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("CACHEPLANE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("CACHEPLANE_HSTS_PRELOAD", False)
    # HSTS preload is hard to undo (browser lists), so it is the operator's opt-in, not a
    # default; the deploy check's reminder about it is silenced for that reason only.
    SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
    # Behind a TLS-terminating proxy that sets X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # Health probes come over plain HTTP from inside the cluster.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# --- Throttling, session audit, /metrics (README: "Audit" and "Throttling") ------------
# Console logins: django-axes counts failures per (username, source IP) in PostgreSQL
# and refuses that pair for the cool-off once the limit is reached (429 + Retry-After).
AUTHENTICATION_BACKENDS = [
    "audit.http.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CACHEPLANE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("CACHEPLANE_LOGIN_LOCKOUT_SECONDS", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A fixed cool-off (not extended by attempts made while locked) keeps Retry-After true.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "tenants.actor.client_ip"
AXES_LOCKOUT_CALLABLE = "audit.http.login_lockout_response"
AXES_VERBOSE = False
# API keys: failed guesses counted per source IP in Redis (tenants.services.throttling).
CACHEPLANE_API_KEY_FAILURE_LIMIT = env_int("CACHEPLANE_API_KEY_FAILURE_LIMIT", 20, minimum=1)
CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS = env_int(
    "CACHEPLANE_API_KEY_FAILURE_WINDOW_SECONDS", 300, minimum=1
)
CACHEPLANE_API_KEY_LOCKOUT_SECONDS = env_int("CACHEPLANE_API_KEY_LOCKOUT_SECONDS", 900, minimum=1)
# Refused CSRF checks are audited, then answered with Django's standard page.
CSRF_FAILURE_VIEW = "audit.http.csrf_failure"
# /metrics: a bearer token for Prometheus. Unset: development serves metrics without
# tenant labels; production serves nothing (controlplane/metrics.py).
CACHEPLANE_METRICS_TOKEN = env_str("CACHEPLANE_METRICS_TOKEN", None)
if CACHEPLANE_METRICS_TOKEN is not None and len(CACHEPLANE_METRICS_TOKEN) < 32:
    raise ConfigError("CACHEPLANE_METRICS_TOKEN", "must be at least 32 characters")

# --- REST API -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.api.authentication.ApiKeyAuthentication",
        "audit.http.CsrfAuditedSessionAuthentication",
    ],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.DefaultCursorPagination",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.errors.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["controlplane.api.parsers.StrictJSONParser"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Cacheplane API",
    "DESCRIPTION": "Multi-tenant control plane for LLM context caches.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "CacheStateEnum": "caches.models.CacheState",
        "TenantStateEnum": "tenants.models.TenantState",
    },
}

# --- Channels -------------------------------------------------------------------------
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py >= 6 gives every connection a 5 s socket timeout by default, and
            # channels-redis waits for messages with a 5 s BZPOPMIN: the read timed out
            # together with the command, raising redis TimeoutError in the consumer and
            # dropping every idle WebSocket after ~5 s. The read timeout must be well
            # above the blocking timeout (it still bounds a dead Redis connection).
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": env_float(
                        "CACHEPLANE_CHANNELS_SOCKET_TIMEOUT", 30.0, minimum=10.0
                    ),
                    "socket_keepalive": True,
                    "health_check_interval": 15,
                }
            ],
            "prefix": env_str("CACHEPLANE_CHANNELS_PREFIX", "cacheplane:asgi"),
        },
    }
}

# --- Celery (see controlplane/celery.py for the reasons behind each value) ------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CACHEPLANE_TASK_SOFT_TIME_LIMIT", 120, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CACHEPLANE_TASK_TIME_LIMIT", 150, minimum=2)
if CELERY_TASK_TIME_LIMIT <= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ConfigError("CACHEPLANE_TASK_TIME_LIMIT", "must exceed CACHEPLANE_TASK_SOFT_TIME_LIMIT")
CELERY_TASK_DEFAULT_QUEUE = env_str("CACHEPLANE_TASK_QUEUE", "cacheplane")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Above the longest hard limit, with margin, so a task still running is never redelivered
# to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT * 2 + 60}

# --- Logging --------------------------------------------------------------------------
LOG_LEVEL = env_choice("CACHEPLANE_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOG_FORMAT = env_choice("CACHEPLANE_LOG_FORMAT", "json", ("json", "console"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.logging.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "controlplane.logging.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "console": {"format": "%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "uvicorn.access": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # google-genai logs an INFO line for every request ("AFC is enabled ...").
        "google_genai": {"level": "WARNING"},
        # Celery's per-task INFO lines ("Task ... received", "... succeeded in 0.01s",
        # beat's "Sending due task"): with a 5 s beat schedule they were ~40 KB a minute
        # of logs on an idle system. Failures and retries still log at WARNING/ERROR.
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
    },
}

# --- Cacheplane -----------------------------------------------------------------------
CACHEPLANE_DATA_DIR = Path(env_str("CACHEPLANE_DATA_DIR", str(BASE_DIR / ".cacheplane")) or "")

# --- Audit export and signing (see README "Audit export and verification") -------------
CACHEPLANE_EXPORT_DIR = Path(
    env_str("CACHEPLANE_EXPORT_DIR", str(CACHEPLANE_DATA_DIR / "exports")) or ""
)
# Ed25519 private key (PEM, or base64 of the 32 raw bytes) and its key id, set together.
# Unset in development: one is generated under CACHEPLANE_DATA_DIR (0600). Production
# must set both (exports and digests fail with `signing_key_missing` otherwise).
CACHEPLANE_AUDIT_SIGNING_KEY = env_str("CACHEPLANE_AUDIT_SIGNING_KEY", "") or ""
CACHEPLANE_AUDIT_SIGNING_KEY_ID = env_str("CACHEPLANE_AUDIT_SIGNING_KEY_ID", "") or ""
if bool(CACHEPLANE_AUDIT_SIGNING_KEY) != bool(CACHEPLANE_AUDIT_SIGNING_KEY_ID):
    raise ConfigError(
        "CACHEPLANE_AUDIT_SIGNING_KEY_ID",
        "CACHEPLANE_AUDIT_SIGNING_KEY and CACHEPLANE_AUDIT_SIGNING_KEY_ID are set together",
    )
if CACHEPLANE_AUDIT_SIGNING_KEY:
    from audit.signing import private_key_load

    parse_with("CACHEPLANE_AUDIT_SIGNING_KEY", CACHEPLANE_AUDIT_SIGNING_KEY, private_key_load)
    if len(CACHEPLANE_AUDIT_SIGNING_KEY_ID) > 64:
        raise ConfigError("CACHEPLANE_AUDIT_SIGNING_KEY_ID", "must be at most 64 characters")

# --- Caches and providers (see README "Cache objects") -----------------------------------
CACHEPLANE_CACHE_MAX_TTL_SECONDS = env_int(
    "CACHEPLANE_CACHE_MAX_TTL_SECONDS", 7 * 86400, minimum=60
)
CACHEPLANE_CACHE_DEFAULT_TTL_SECONDS = env_int(
    "CACHEPLANE_CACHE_DEFAULT_TTL_SECONDS", 3600, minimum=60
)
CACHEPLANE_CACHE_MAX_CONTENT_BYTES = env_int(
    "CACHEPLANE_CACHE_MAX_CONTENT_BYTES", 10 * 1024 * 1024, minimum=1024
)
# Empty: Google's endpoints. A URL: a Vertex emulator (development, tests, demos).
CACHEPLANE_VERTEX_BASE_URL = env_str("CACHEPLANE_VERTEX_BASE_URL", "") or ""
CACHEPLANE_VERTEX_API_VERSION = env_str("CACHEPLANE_VERTEX_API_VERSION", "v1") or "v1"
CACHEPLANE_VERTEX_PROJECT = env_str("CACHEPLANE_VERTEX_PROJECT", "") or ""
CACHEPLANE_VERTEX_LOCATION = env_str("CACHEPLANE_VERTEX_LOCATION", "us-central1") or ""
# A static bearer token (emulators only); unset: Application Default Credentials.
CACHEPLANE_VERTEX_STATIC_TOKEN = env_str("CACHEPLANE_VERTEX_STATIC_TOKEN", "") or ""
CACHEPLANE_VERTEX_DISPLAY_PREFIX = env_str("CACHEPLANE_VERTEX_DISPLAY_PREFIX", "cacheplane-") or ""
# No "adopt": a remote whose record is still creating it is always adopted; one that no
# record claims has no tenant to be adopted into (the value was accepted and did "report").
CACHEPLANE_RECONCILE_ORPHANS = env_choice(
    "CACHEPLANE_RECONCILE_ORPHANS", "report", ("report", "delete")
)
CACHEPLANE_VLLM_API_KEY = env_str("CACHEPLANE_VLLM_API_KEY", "") or ""
CACHEPLANE_VLLM_PIN_REFRESH_SECONDS = env_int("CACHEPLANE_VLLM_PIN_REFRESH_SECONDS", 120, minimum=5)
CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_PROVIDER_TIMEOUT_SECONDS", 60.0, minimum=0.1
)
# Provider calls are not retried in the SDK: the operation row bounds its attempts and the
# Celery task spaces them (controlplane.celery.TRANSIENT_RETRY_POLICY; README, Code health).
CACHEPLANE_OPERATION_MAX_ATTEMPTS = env_int("CACHEPLANE_OPERATION_MAX_ATTEMPTS", 8, minimum=1)
# A running operation whose worker died is re-enqueued once its lease lapses.
CACHEPLANE_OPERATION_LEASE_SECONDS = env_int(
    "CACHEPLANE_OPERATION_LEASE_SECONDS", CELERY_TASK_TIME_LIMIT + 30, minimum=1
)
CACHEPLANE_SWEEP_BATCH = env_int("CACHEPLANE_SWEEP_BATCH", 500, minimum=1)

# --- Billing (see README "Billing") -----------------------------------------------------
# Redis list the gateway appends usage rows to; the flush task (beat, every 5 s) drains it
# in batches of CACHEPLANE_BILLING_FLUSH_BATCH rows.
CACHEPLANE_BILLING_USAGE_QUEUE_KEY = (
    env_str("CACHEPLANE_BILLING_USAGE_QUEUE_KEY", "cacheplane:billing:usage")
    or "cacheplane:billing:usage"
)
CACHEPLANE_BILLING_FLUSH_BATCH = env_int("CACHEPLANE_BILLING_FLUSH_BATCH", 5000, minimum=1)
CACHEPLANE_BILLING_FLUSH_MAX_BATCHES = env_int(
    "CACHEPLANE_BILLING_FLUSH_MAX_BATCHES", 40, minimum=1
)
# A claimed batch not finished after this long (its worker died) is flushed again.
CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS = env_int(
    "CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS", CELERY_TASK_TIME_LIMIT * 2, minimum=1
)
CACHEPLANE_BILLING_RESERVATION_TTL_SECONDS = env_int(
    "CACHEPLANE_BILLING_RESERVATION_TTL_SECONDS", 900, minimum=1
)
CACHEPLANE_BILLING_EXPIRE_BATCH = env_int("CACHEPLANE_BILLING_EXPIRE_BATCH", 500, minimum=1)
CACHEPLANE_BILLING_WEBHOOK_TIMEOUT_SECONDS = env_int(
    "CACHEPLANE_BILLING_WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1
)
# The default vLLM pool's GPU-hour chargeback, seeded once by migration billing.0004 (the
# pool "default", also used for pools without a price of their own); see .env.example.
CACHEPLANE_VLLM_DEFAULT_GPU_HOUR_USD = env_float(
    "CACHEPLANE_VLLM_DEFAULT_GPU_HOUR_USD", 2.50, minimum=0.0
)
CACHEPLANE_VLLM_DEFAULT_PREFILL_TOKENS_PER_GPU_SECOND = env_int(
    "CACHEPLANE_VLLM_DEFAULT_PREFILL_TOKENS_PER_GPU_SECOND", 4600, minimum=1
)
CACHEPLANE_VLLM_DEFAULT_DECODE_TOKENS_PER_GPU_SECOND = env_int(
    "CACHEPLANE_VLLM_DEFAULT_DECODE_TOKENS_PER_GPU_SECOND", 1500, minimum=1
)
CACHEPLANE_VLLM_DEFAULT_KV_BLOCKS_PER_GPU = env_int(
    "CACHEPLANE_VLLM_DEFAULT_KV_BLOCKS_PER_GPU", 2000, minimum=1
)

# --- Gateway -------------------------------------------------------------------------------
CACHEPLANE_GATEWAY_MAX_BODY_BYTES = env_int(
    "CACHEPLANE_GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024
)
CACHEPLANE_GATEWAY_MAX_TOKENS = env_int("CACHEPLANE_GATEWAY_MAX_TOKENS", 8192, minimum=1)
# Gateway budget holds and rate limits live in Redis under these prefixes.
CACHEPLANE_BUDGET_REDIS_PREFIX = env_str("CACHEPLANE_BUDGET_REDIS_PREFIX", "cacheplane:budget")
CACHEPLANE_GATEWAY_RATELIMIT_PREFIX = env_str(
    "CACHEPLANE_GATEWAY_RATELIMIT_PREFIX", "cacheplane:ratelimit"
)
# Fair share: requests in flight per vLLM worker (per gateway process) and per Vertex
# model before requests queue in weighted fair order; a queued request waits at most
# CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS, then gets 429 pool_saturated.
CACHEPLANE_GATEWAY_WORKER_CONCURRENCY = env_int(
    "CACHEPLANE_GATEWAY_WORKER_CONCURRENCY", 64, minimum=1
)
CACHEPLANE_GATEWAY_VERTEX_CONCURRENCY = env_int(
    "CACHEPLANE_GATEWAY_VERTEX_CONCURRENCY", 256, minimum=1
)
CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_GATEWAY_QUEUE_TIMEOUT_SECONDS", 30.0, minimum=0.01
)
CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS", 120.0, minimum=0.1
)

# Budget webhooks may reach private/loopback addresses only when allowed (development).
CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE = env_bool(
    "CACHEPLANE_BILLING_WEBHOOK_ALLOW_PRIVATE", not PRODUCTION
)
# Gateway routing: "kv_events" routes on the KV indexer's Redis index when it is fresh
# (falling back per request to the character-based guess); "approximate" never reads it.
CACHEPLANE_ROUTING_INDEX = env_choice(
    "CACHEPLANE_ROUTING_INDEX", "kv_events", ("kv_events", "approximate")
)

# WebSocket revocation bound: how often an open socket re-reads its credential and
# re-decides access (tenants.access) — a logout, revoked key, removed binding or
# suspension closes it within this many seconds.
CACHEPLANE_WS_RECHECK_SECONDS = env_float("CACHEPLANE_WS_RECHECK_SECONDS", 5.0, minimum=0.05)
