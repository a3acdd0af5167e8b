"""Operational checks shared by /readyz, the CLI and the console.

Each check returns ``None`` when healthy or a short reason string, so callers can name
exactly what failed (``database: connection refused``) without a traceback.
"""

from __future__ import annotations

import socket
import time

from django.db import connections

from controlplane.redis import keys
from controlplane.redis.clients import redis_client as redis_client  # re-exported

HEARTBEAT_KEY_PREFIX = keys.HEARTBEAT
HEARTBEAT_TTL_SECONDS = 90


def check_database() -> str | None:
    """None if a trivial query succeeds on the default database."""
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return _reason(exc)
    return None


def check_redis(url: str | None = None) -> str | None:
    """None if Redis at ``url`` (default REDIS_URL) answers PING."""
    try:
        redis_client(url).ping()
    except Exception as exc:
        return _reason(exc)
    return None


def check_broker() -> str | None:
    """None if the Celery broker accepts a connection."""
    from controlplane.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return _reason(exc)
    return None


def readiness() -> dict[str, str | None]:
    """Run every dependency check; values are None (ok) or the failure reason."""
    return {"database": check_database(), "redis": check_redis(), "broker": check_broker()}


def worker_heartbeat_record() -> str:
    """Record this worker's liveness in Redis with a TTL; returns the key written."""
    key = keys.worker_heartbeat(socket.gethostname())
    redis_client().set(key, str(time.time()), ex=HEARTBEAT_TTL_SECONDS)
    return key


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200]
