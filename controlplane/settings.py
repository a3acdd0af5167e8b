"""Django settings, read from the environment only (see ``.env.example``).

Development and production differ by environment alone: ``CACHEPLANE_ENV=production``
makes the secret key, database, Redis and allowed hosts mandatory and turns on the
transport-security settings that ``manage.py check --deploy`` expects.

This module (``DJANGO_SETTINGS_MODULE``) holds Django's own settings (apps, middleware,
templates, static files, security, throttling, REST API); the others come from
``settings_deployment`` (repository root, development or production), ``settings_services``
(PostgreSQL, Redis, Channels, Celery), ``settings_logging`` and ``settings_cacheplane``
(every ``CACHEPLANE_*`` value the apps read).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from controlplane.env import (
    ConfigError,
    env_bool,
    env_int,
    env_list,
    env_str,
    refuse_placeholder,
)

# Django reads settings as this module's attributes, so every uppercase name of the four
# settings_* modules becomes a setting here. The star imports are deliberate (F403 silenced
# on those four lines only): a setting added there cannot be forgotten in a list of names.
from controlplane.settings_cacheplane import *  # noqa: F403
from controlplane.settings_deployment import *  # noqa: F403
from controlplane.settings_deployment import BASE_DIR, PRODUCTION
from controlplane.settings_identity import *  # noqa: F403
from controlplane.settings_logging import *  # noqa: F403
from controlplane.settings_services import *  # noqa: F403

_DEV_SECRET = "dev-insecure-cacheplane-secret-key-change-me-in-production-0123456789"
SECRET_KEY = env_str(
    "CACHEPLANE_SECRET_KEY", None if PRODUCTION else _DEV_SECRET, required=PRODUCTION
)
if PRODUCTION and len(SECRET_KEY or "") < 50:
    raise ConfigError("CACHEPLANE_SECRET_KEY", "must be at least 50 characters in production")
if PRODUCTION:
    # A placeholder passes the length check (the manifests' example key is 67 characters):
    # refuse every known one, so an unedited Secret stops start-up instead of serving with
    # a publicly known key or password.
    refuse_placeholder("CACHEPLANE_SECRET_KEY", SECRET_KEY)
    if SECRET_KEY == _DEV_SECRET:
        raise ConfigError("CACHEPLANE_SECRET_KEY", "is the development key")
DEBUG = env_bool("CACHEPLANE_DEBUG", False)

ALLOWED_HOSTS = env_list(
    "CACHEPLANE_ALLOWED_HOSTS",
    [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"],
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise ConfigError("CACHEPLANE_ALLOWED_HOSTS", "is required in production")
CSRF_TRUSTED_ORIGINS = env_list("CACHEPLANE_CSRF_TRUSTED_ORIGINS", [])

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
    "identity",
    "audit",
    "caches",
    "billing",
    "workers",
    "gateway",
    "frontend",
]

MIDDLEWARE = [
    # Probes and scrapes address the pod by IP (see the class): before any host check.
    "controlplane.middleware.MachineEndpointMiddleware",
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
    # /scim/v2/: the SCIM token alone authenticates (identity.scim).
    "identity.scim.ScimTokenMiddleware",
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
# An installed package's BASE_DIR is site-packages: the image collects into its own
# directory (Containerfile) and builds node_modules outside the package.
STATIC_ROOT = Path(env_str("CACHEPLANE_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# Front-end packages come from the npm registry (package.json) and are served straight
# from node_modules: nothing is copied into the repository. `cacheplane up` and the test
# suite run `npm ci` when node_modules is missing (controlplane/assets.py).
NODE_MODULES = Path(env_str("CACHEPLANE_NODE_MODULES", str(BASE_DIR / "node_modules")))
STATICFILES_DIRS = [
    ("vendor/chart.js", NODE_MODULES / "chart.js" / "dist"),
    ("vendor/htmx", NODE_MODULES / "htmx.org" / "dist"),
    ("vendor/chartjs-adapter-date-fns", NODE_MODULES / "chartjs-adapter-date-fns" / "dist"),
    # Drag-to-zoom on the console's time charts; hammerjs is its touch (pinch) dependency.
    ("vendor/chartjs-plugin-zoom", NODE_MODULES / "chartjs-plugin-zoom" / "dist"),
    ("vendor/hammerjs", NODE_MODULES / "hammerjs"),
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
    # Local passwords (break-glass; CACHEPLANE_PASSWORD_LOGIN=false turns them off).
    "identity.backends.PasswordBackend",
    # Sessions opened by single sign-on (docs/identity.md).
    "identity.backends.SsoSessionBackend",
]
AXES_FAILURE_LIMIT = env_int("CACHEPLANE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("CACHEPLANE_LOGIN_LOCKOUT_SECONDS", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A fixed cool-off (not extended by attempts made while locked) keeps Retry-After true.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "tenants.actor.client_ip"
# Fits axes' 255-character column (a longer login name was a 500).
AXES_USERNAME_CALLABLE = "identity.backends.axes_username"
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
if PRODUCTION:
    refuse_placeholder("CACHEPLANE_METRICS_TOKEN", CACHEPLANE_METRICS_TOKEN)
    refuse_placeholder("CACHEPLANE_VLLM_API_KEY", env_str("CACHEPLANE_VLLM_API_KEY"))
    for _url_variable in ("DATABASE_URL", "DATABASE_MIGRATE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        refuse_placeholder(_url_variable, env_str(_url_variable), url=True)

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
