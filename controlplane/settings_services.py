"""Settings of the services Cacheplane runs on: PostgreSQL, Redis, Channels and Celery.

Both URLs are mandatory (``cacheplane up`` provides embedded servers when they are unset);
the comment beside each pool, Channels and Celery value says why it is set so.
"""

from __future__ import annotations

from controlplane.env import (
    ConfigError,
    env_bool,
    env_float,
    env_int,
    env_str,
    parse_database_url,
    parse_redis_url,
)

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
