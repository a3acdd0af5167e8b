"""The end of a request in one Redis round trip: its books closed and its usage recorded.

Closing a request gives back its rate-limit slot and settles its budget hold (one step
of ``gateway.limits``' closing script) and records its usage and cache hits
(``gateway.metering``); this replica's pending load changes ride along
(``gateway.directory``). Both go to Redis on one pipeline, group-committed per event
loop: requests that finish while a batch is on its way join the next one, so a batch is
one script run (each request still its own atomic step inside it) plus one ``RPUSH`` of
every usage message, whatever the concurrency (``controlplane.redis.batch.GroupCommit``). A request
returns once its own batch is written, as when it was written alone.

Failures never fail a response (the answer is decided): a lost script (Redis restarted)
runs the closing steps again on their own; usage Redis did not take goes straight to the
ledger (``metering.write_direct``, idempotent); anything else is logged.
"""

from __future__ import annotations

import logging

from redis.exceptions import NoScriptError

from controlplane.db import db_sync_to_async
from controlplane.redis.batch import GroupCommit
from controlplane.redis.clients import async_client
from gateway import limits, metering, routing
from gateway.directory import directory
from gateway.metering import Meter

logger = logging.getLogger(__name__)

Closing = tuple[limits.ClosePart | None, Meter | None]


async def close(part: limits.ClosePart | None, meter: Meter | None) -> None:
    """Close one request: ``part`` (its closing step, see ``limits.close_part``) and
    ``meter`` (its usage; None for a request refused before it was sent)."""
    if part is None and meter is None:
        return
    await _commits.submit((part, meter))


async def _write(batch: list[Closing]) -> list[None]:
    try:
        await _write_batch(
            [part for part, _ in batch if part is not None],
            [meter for _, meter in batch if meter is not None],
        )
    except Exception:  # a bug: the answers are sent; say so, never fail a request
        logger.exception("closing requests failed")
    return [None] * len(batch)


_commits: GroupCommit[Closing, None] = GroupCommit(_write)


async def _write_batch(parts: list[limits.ClosePart], meters: list[Meter]) -> None:
    messages, recorded = metering.encode_usage(meters)
    pipe = async_client().pipeline(transaction=False)
    if parts:
        limits.queue_close(pipe, parts)
    if recorded:
        metering.queue_usage(pipe, messages, recorded)
    usage_end = len(pipe)
    # This replica's pending load changes (the -1 of these requests among them) ride on
    # the same round trip; a failure only makes them late, as in ``gateway.directory``.
    routing.queue_loads(pipe, replica=directory.replica, changes=directory.take_unpublished())
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
        # Each meter carries the pipeline's own price (None: unpriced); no DB on the loop.
        metering.tick(recorded)


async def _close_alone(parts: list[limits.ClosePart]) -> None:
    """The closing steps on their own (``EVAL`` when Redis lost the script)."""
    try:
        await limits.rerun_close(parts)
    except Exception:
        logger.exception("closing the books failed")
