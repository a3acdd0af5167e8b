"""The Redis clients: one pooled sync client per URL, one asyncio client per event loop.

The hot path talks to Redis without a thread hop, through redis-py's ``redis.asyncio``
client with hiredis packing (:class:`HiredisPackedConnection`); everything else (Celery
tasks, services, the console) uses the sync client.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

import hiredis
import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.typing import EncodableT

from controlplane.loop_local import LoopLocal


@lru_cache(maxsize=4)
def redis_client(url: str | None = None) -> redis.Redis:
    """A pooled Redis client for ``url`` (default REDIS_URL), with short timeouts."""
    return redis.Redis.from_url(
        url or settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2
    )


class HiredisPackedConnection(aioredis.Connection):
    """redis-py's asyncio connection, packing commands with hiredis (C) like its sync one.

    redis-py's asyncio ``pack_command`` is Python: with the scripts' dozens of arguments
    it was the gateway's largest single CPU cost (about a fifth of a request's CPU).
    """

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        command = args[0]
        if isinstance(command, str) and " " in command:  # e.g. "CONFIG GET", as redis-py
            args = (*command.split(), *args[1:])
        # hiredis's stub types the argument as a one-element tuple; it takes any length.
        return [hiredis.pack_command(args)]  # type: ignore[arg-type]

    async def check_health(self) -> None:
        """PING a connection idle for ``HEALTH_CHECK_SECONDS`` before using it; if the
        PING fails (Redis restarted since: every pooled connection is dead), connect
        again instead of failing the request. Only the PING is repeated, never a script
        (a hold must not be taken twice)."""
        try:
            await super().check_health()  # type: ignore[no-untyped-call]
        except (RedisConnectionError, OSError):
            await self.disconnect()
            await self.connect()  # type: ignore[no-untyped-call]


#: A pooled connection idle this long is checked before use (see ``check_health``):
#: shorter than a Redis restart, longer than the gap between requests under load.
HEALTH_CHECK_SECONDS = 1.0


def connection_pool(url: str, *, timeout: float = 10.0) -> aioredis.BlockingConnectionPool:
    """A bounded, blocking pool with hiredis packing: a burst of requests waits for one
    of a few connections instead of opening hundreds at once (which is what times out).
    ``timeout`` bounds connecting, each reply and the wait for a pooled connection."""
    options: dict[str, Any] = {}
    if urlparse(url).scheme == "redis":  # TCP without TLS (rediss:// and unix:// keep theirs)
        options["connection_class"] = HiredisPackedConnection
    return aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=64,
        timeout=timeout,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        health_check_interval=HEALTH_CHECK_SECONDS,
        **options,
    )


_async_clients: LoopLocal[aioredis.Redis] = LoopLocal(
    lambda: aioredis.Redis(connection_pool=connection_pool(settings.REDIS_URL))
)


def async_client() -> aioredis.Redis:
    """The running loop's hot-path client (a restarted loop, e.g. in tests, gets its own)."""
    return _async_clients.get()
