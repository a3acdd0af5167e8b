"""Values kept per asyncio event loop: one mechanism for every per-loop client and batch.

An asyncio client (Redis, aiohttp) belongs to the loop that made it; a process that runs
several loops one after the other (tests, ``async_to_sync``) must not hand a finished
loop's client to a new one. :class:`LoopLocal` keys its values by the loop object itself,
weakly: a loop that is garbage-collected takes its value with it, so nothing needs a
size cap or a test-only ``clear()``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """``get()`` returns this loop's value, made by ``factory`` on the loop's first call."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            value = self._values[loop] = self._factory()
        return value

    def pop(self) -> T | None:
        """Forget the running loop's value (it is closed or replaced); returns it."""
        return self._values.pop(asyncio.get_running_loop(), None)

    def forget(self) -> None:
        """Forget every loop's value, as a new process would start (multi-process tests)."""
        self._values.clear()

    def values(self) -> Iterator[T]:
        return iter(list(self._values.values()))
