"""Django settings, read from the environment only (see ``.env.example``).

Development and production differ by environment alone: ``CACHEPLANE_ENV=production``
makes the secret key, database, Redis and allowed hosts mandatory and turns on the
transport-security settings that ``manage.py check --deploy`` expects.
"""

from __future__ import annotations

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
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

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

# --- REST API -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.DefaultCursorPagination",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.errors.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
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
            "hosts": [REDIS_URL],
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
CACHEPLANE_RECONCILE_ORPHANS = env_choice(
    "CACHEPLANE_RECONCILE_ORPHANS", "report", ("report", "adopt", "delete")
)
CACHEPLANE_VLLM_API_KEY = env_str("CACHEPLANE_VLLM_API_KEY", "") or ""
CACHEPLANE_VLLM_PIN_REFRESH_SECONDS = env_int("CACHEPLANE_VLLM_PIN_REFRESH_SECONDS", 120, minimum=5)
CACHEPLANE_PROVIDER_TIMEOUT_SECONDS = env_float(
    "CACHEPLANE_PROVIDER_TIMEOUT_SECONDS", 60.0, minimum=0.1
)
CACHEPLANE_PROVIDER_RETRY_ATTEMPTS = env_int("CACHEPLANE_PROVIDER_RETRY_ATTEMPTS", 4, minimum=1)
CACHEPLANE_PROVIDER_RETRY_INITIAL_DELAY = env_float(
    "CACHEPLANE_PROVIDER_RETRY_INITIAL_DELAY", 1.0, minimum=0.0
)
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
