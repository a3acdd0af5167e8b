"""Closing a request's books: usage from the worker's answer, budget settle, metering."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async

from gateway import budget
from gateway.metering import Meter, meter_finish_many


def meter_usage(meter: Meter, usage: dict[str, Any]) -> None:
    meter.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    meter.output_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    meter.cached_tokens = int(details.get("cached_tokens") or 0)


async def finish(meter: Meter, reservation) -> None:
    if meter.latency_ms is None:
        meter.latency_ms = int((time.perf_counter() - meter.started) * 1000)
    await budget.settle(reservation, meter)
    await _meter_queue().record(meter)


class MeterQueue:
    """Group commit for metering on one event loop.

    Requests that finish while a batch is being written join the next batch: one thread
    hop and one Redis round trip per batch instead of per request. Each request still
    returns only once its own record is written, as when it was written alone.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list[tuple[Meter, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def record(self, meter: Meter) -> None:
        written = self.loop.create_future()
        self._pending.append((meter, written))
        if self._writer is None or self._writer.done():
            self._writer = self.loop.create_task(self._write())
        await written

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            error: Exception | None = None
            try:
                await sync_to_async(meter_finish_many, thread_sensitive=False)(
                    [meter for meter, _ in batch]
                )
            except Exception as exc:
                error = exc
            for _, written in batch:
                if written.done():  # its request was cancelled; the record is written anyway
                    continue
                if error is None:
                    written.set_result(None)
                else:
                    written.set_exception(error)


_queue: MeterQueue | None = None


def _meter_queue() -> MeterQueue:
    """The queue of the running loop (a new loop, e.g. a restarted server, gets its own)."""
    global _queue
    loop = asyncio.get_running_loop()
    if _queue is None or _queue.loop is not loop:
        _queue = MeterQueue(loop)
    return _queue
