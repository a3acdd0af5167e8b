"""The end of a request in one Redis round trip: its books closed and its usage recorded.

Closing a request gives back its rate-limit slot and settles its budget hold (one step
of ``gateway.limits``' closing script) and records its usage and cache hits
(``gateway.metering``); this replica's pending load changes ride along
(``gateway.directory``). Both go to Redis on one pipeline, group-committed per event
loop: requests that finish while a batch is on its way join the next one, so a batch is
one script run (each request still its own atomic step inside it) plus one ``RPUSH`` of
every usage message, whatever the concurrency. A request returns once its own batch is
written, as when it was written alone.

Failures never fail a response (the answer is decided): a lost script (Redis restarted)
runs the closing steps again on their own; usage Redis did not take goes straight to the
ledger (``metering.write_direct``, idempotent); anything else is logged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from redis.exceptions import NoScriptError

from controlplane.db import db_sync_to_async
from gateway import hotpath_redis, limits, metering
from gateway.metering import Meter

logger = logging.getLogger(__name__)

MAX_BATCH = 64


@dataclass
class _Loop:
    pending: list[tuple[limits.ClosePart | None, Meter | None, asyncio.Future[None]]] = field(
        default_factory=list
    )
    writer: asyncio.Task[None] | None = None


_loops: dict[int, tuple[asyncio.AbstractEventLoop, _Loop]] = {}


async def close(part: limits.ClosePart | None, meter: Meter | None) -> None:
    """Close one request: ``part`` (its closing step, see ``limits.close_part``) and
    ``meter`` (its usage; None for a request refused before it was sent)."""
    if part is None and meter is None:
        return
    loop = asyncio.get_running_loop()
    entry = _loops.get(id(loop))
    if entry is None or entry[0] is not loop:
        if len(_loops) > 16:  # loops of finished test servers
            _loops.clear()
        entry = _loops[id(loop)] = (loop, _Loop())
    state = entry[1]
    done = loop.create_future()
    state.pending.append((part, meter, done))
    if state.writer is None or state.writer.done():
        state.writer = loop.create_task(_write(state))
    await done


async def _write(state: _Loop) -> None:
    while state.pending:
        batch = state.pending[:MAX_BATCH]
        del state.pending[:MAX_BATCH]
        try:
            await _write_batch(
                [part for part, _, _ in batch if part is not None],
                [meter for _, meter, _ in batch if meter is not None],
            )
        except Exception:  # a bug: the answers are sent; say so, never hang a request
            logger.exception("closing requests failed")
        for _, _, done in batch:
            if not done.done():  # its request was cancelled; it was closed anyway
                done.set_result(None)


async def _write_batch(parts: list[limits.ClosePart], meters: list[Meter]) -> None:
    from gateway.directory import directory
    from gateway.routing import queue_loads

    messages, recorded = metering.encode_usage(meters)
    pipe = hotpath_redis.client().pipeline(transaction=False)
    if parts:
        limits.queue_close(pipe, parts)
    if recorded:
        metering.queue_usage(pipe, messages, recorded)
    usage_end = len(pipe)
    # This replica's pending load changes (the -1 of these requests among them) ride on
    # the same round trip; a failure only makes them late, as in ``gateway.directory``.
    queue_loads(pipe, replica=directory.replica, changes=directory.take_unpublished())
    replies: list[object] | None
    try:
        replies = await pipe.execute(raise_on_error=False)
    except Exception:  # nothing reached Redis (unreachable, timed out)
        logger.warning("Redis unreachable while closing %d requests", len(parts) + len(meters))
        replies = None
    if parts:
        settled = replies[0] if replies is not None else None
        if replies is None or isinstance(settled, NoScriptError):
            await _close_alone(parts)
        elif isinstance(settled, Exception):
            logger.error("closing the books failed: %s", settled)
    if recorded:
        usage = replies[1 if parts else 0 : usage_end] if replies is not None else None
        if usage is None or any(isinstance(reply, Exception) for reply in usage):
            await db_sync_to_async(metering.write_direct)(messages, recorded)
        metering.tick(recorded)


async def _close_alone(parts: list[limits.ClosePart]) -> None:
    """The closing steps on their own (``EVAL`` when Redis lost the script)."""
    try:
        await limits.rerun_close(parts)
    except Exception:
        logger.exception("closing the books failed")
