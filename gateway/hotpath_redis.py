"""The gateway's asyncio Redis client (one per event loop) and its Lua scripts.

The hot path talks to Redis without a thread hop: rate limits, budget holds and their
settlement are one ``EVALSHA`` each on this client.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from django.conf import settings
from redis.commands.core import AsyncScript

_clients: dict[int, tuple[asyncio.AbstractEventLoop, aioredis.Redis]] = {}


def client() -> aioredis.Redis:
    """The running loop's client (a restarted loop, e.g. in tests, gets its own)."""
    loop = asyncio.get_running_loop()
    entry = _clients.get(id(loop))
    if entry is None or entry[0] is not loop:
        entry = (
            loop,
            # A bounded, blocking pool: a burst of requests waits for one of a few
            # connections instead of opening hundreds at once (which is what times out).
            aioredis.Redis(
                connection_pool=aioredis.BlockingConnectionPool.from_url(
                    settings.REDIS_URL,
                    max_connections=64,
                    timeout=10,
                    socket_connect_timeout=10,
                    socket_timeout=10,
                )
            ),
        )
        if len(_clients) > 16:  # loops of finished test servers
            _clients.clear()
        _clients[id(loop)] = entry
    return entry[1]


_scripts: dict[tuple[int, str], AsyncScript] = {}


def script(source: str) -> AsyncScript:
    """A registered script of the running loop's client (EVALSHA, EVAL on a cache miss)."""
    redis = client()
    key = (id(redis), source)
    found = _scripts.get(key)
    if found is None:
        if len(_scripts) > 64:
            _scripts.clear()
        found = _scripts[key] = redis.register_script(source)
    return found
