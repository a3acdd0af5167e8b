"""One load at a time per key: concurrent cache misses share the first one's answer.

Without it, every request in flight when a cached entry expires would reload it (a
thundering herd of identical queries every refresh interval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import TTLCache

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class SingleFlightCache(Generic[_K, _V]):
    """A TTL cache for the event loop whose misses are loaded once per key."""

    def __init__(self, *, maxsize: int, ttl: float) -> None:
        self._values: TTLCache[_K, _V] = TTLCache(maxsize=maxsize, ttl=ttl)
        self._loading: dict[_K, asyncio.Future[_V]] = {}

    async def get(self, key: _K, load: Callable[[], Awaitable[_V]], *, fresh: bool = False) -> _V:
        if not fresh:
            try:
                return self._values[key]
            except KeyError:
                pass
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = asyncio.get_running_loop().create_future()
        self._loading[key] = pending
        try:
            value = await load()
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        else:
            self._values[key] = value
            pending.set_result(value)
            return value
        finally:
            del self._loading[key]

    def clear(self) -> None:
        self._values.clear()
