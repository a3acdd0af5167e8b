"""Database access from async code that gives its pooled connection back.

``asgiref.sync_to_async(fn, thread_sensitive=False)`` runs ``fn`` on an executor thread
and leaves that thread's Django connection open afterwards: with the psycopg pool, each
executor thread then keeps one pool connection checked out for good, and once there are
more threads than ``CACHEPLANE_DB_POOL_MAX_SIZE`` callers wait for the pool timeout.
``db_sync_to_async`` is channels' ``database_sync_to_async`` (which closes unusable or
obsolete connections before and after the call; with the pool and ``CONN_MAX_AGE=0`` that
returns the connection to the pool) on the shared executor, for the same concurrency as
``thread_sensitive=False``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from channels.db import database_sync_to_async

P = ParamSpec("P")
R = TypeVar("R")


def db_sync_to_async(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run ``fn`` (which uses the ORM) off the event loop; its connection goes back to the
    pool when it returns."""
    wrapped: Callable[P, Awaitable[R]] = database_sync_to_async(fn, thread_sensitive=False)
    return wrapped
