"""Async callers give their pooled connection back (controlplane.db.db_sync_to_async)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from controlplane.db import db_sync_to_async


def _query() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _checked_out() -> int:
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def _checked_out_settled(target: int) -> int:
    """Connections lent out, read again for up to 3 s until it equals ``target``: the pool
    grows in a background thread and counts a connection it is still opening."""
    import time

    deadline = time.monotonic() + 3
    while (value := _checked_out()) != target and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the pool's grower thread
    return value


async def _fan_out(call, n: int = 24) -> list[int]:
    return await asyncio.gather(*(call(_query)() for _ in range(n)))


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_db_sync_to_async_returns_every_connection_to_the_pool() -> None:
    assert connection.settings_dict["OPTIONS"].get("pool"), "the pool is configured"
    before = _checked_out()
    assert await _fan_out(db_sync_to_async) == [1] * 24
    assert _checked_out_settled(before) == before


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_plain_sync_to_async_keeps_connections_checked_out() -> None:
    """Why the helper exists: executor threads hold their connection after the call."""
    before = _checked_out()
    await _fan_out(lambda fn: sync_to_async(fn, thread_sensitive=False))
    assert _checked_out_settled(before) > before
