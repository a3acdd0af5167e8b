"""What a gateway replica keeps per process for the fleet-wide routing state in Redis.

One ``redis.asyncio`` client per event loop, this replica's load reservations not yet
superseded by its published count, and whether the KV index was fresh at the pool's
last look. Everything shared across replicas lives in
Redis (``workers.kv_index``, ``workers.load_state``, ``controlplane.redis.fleet``); this
module holds only what a new process may lose.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio

from controlplane.loop_local import LoopLocal
from controlplane.redis.clients import connection_pool
from workers import load_state

logger = logging.getLogger(__name__)


def _fleet_client_new() -> Any:
    # Short timeouts: routing degrades to the approximate mode rather than wait.
    return redis.asyncio.Redis(connection_pool=connection_pool(_redis_url() or "", timeout=1.0))


_clients: LoopLocal[Any] = LoopLocal(_fleet_client_new)
#: Workers (sorted names) → whether the KV index was fresh for them at the last look.
index_fresh: dict[tuple[str, ...], bool] = {}


def _redis_url() -> str | None:
    from django.conf import settings

    if settings.configured:
        return getattr(settings, "REDIS_URL", None)
    return os.environ.get("REDIS_URL")


def index_enabled() -> bool:
    from django.conf import settings

    mode = (
        getattr(settings, "CACHEPLANE_ROUTING_INDEX", None)
        if settings.configured
        else os.environ.get("CACHEPLANE_ROUTING_INDEX")
    )
    return (mode or "kv_events") == "kv_events"


def fleet_client() -> Any | None:
    """The redis.asyncio client of this event loop (one per loop; None without Redis)."""
    url = _redis_url()
    if not url:
        return None
    return _clients.get()


def queue_loads(pipe: Any, *, replica: str, changes: Mapping[str, Sequence[int]]) -> None:
    """Queue this replica's load changes on a pipeline: per worker ``(delta, sent)``, the
    in-flight count moves by ``delta`` and the routing reservations of the ``sent``
    requests (counted now) are dropped (a +1 and a -1 coalesced into 0 still sent one)."""
    now = time.time()
    for worker, (delta, sent) in changes.items():
        members = [m for m in (_take_reservation(worker, now) for _ in range(sent)) if m]
        load_state.queue_add(
            pipe,
            replica=replica,
            worker=worker,
            delta=delta,
            now=now,
            reservation=members[0] if members else "",
        )
        if len(members) > 1:
            pipe.zrem(load_state.reserved_key(worker), *members[1:])


async def publish_loads(*, replica: str, changes: Mapping[str, Sequence[int]]) -> None:
    """:func:`queue_loads` in one pipeline of its own."""
    client = fleet_client()
    if client is None or not changes:
        return
    try:
        pipe = client.pipeline(transaction=False)
        queue_loads(pipe, replica=replica, changes=changes)
        await pipe.execute()
    except Exception:  # Redis down: others see this replica's load once it is back
        logger.debug("fleet load update failed", exc_info=True)


# This replica's reservations not yet superseded by its own published count, per worker.
_reserved: dict[str, deque[tuple[float, str]]] = {}
reservation_ids = itertools.count()


def forget_local_state() -> None:
    """Forget this process's Redis clients and unsent load reservations, as a new process.

    For tests that play several gateway processes in one: everything shared lives in Redis.
    """
    _clients.forget()
    _reserved.clear()
    index_fresh.clear()


def remember_reservation(worker: str, now: float, member: str) -> None:
    queue = _reserved.setdefault(worker, deque())
    queue.append((now + load_state.RESERVE_SECONDS, member))
    if len(queue) > 10_000:  # requests refused before sending leave theirs behind
        queue.popleft()


def _take_reservation(worker: str, now: float) -> str:
    """This replica's oldest live reservation on ``worker`` (its request is being sent)."""
    queue = _reserved.get(worker)
    while queue:
        expires, member = queue.popleft()
        if expires > now:
            return member
    return ""
