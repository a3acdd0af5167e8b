"""Weighted fair share of a saturated pool across tenants (start-time fair queueing).

Each pool (a vLLM model's workers, or a Vertex model) admits up to its capacity of
requests at once in this process. Past that, requests wait in one queue ordered by a
virtual finish tag: ``max(pool clock, the tenant's last tag) + 1 / weight``, so a tenant
that has queued many requests has its later ones tagged far ahead and a quiet tenant's
next request goes before them. A burst of one tenant therefore delays another by at
most about one admission per competing tenant, whatever the burst's size. ``batch``
requests count at a tenth of their tenant's weight: they get a share under contention
(no starvation) but yield to interactive work.

Per process: with several gateway processes each keeps its own queues; the pool's real
capacity is shared between them (configure the per-worker concurrency accordingly).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field

from controlplane.loop_local import LoopLocal
from gateway.errors import GatewayError

BATCH_WEIGHT_FACTOR = 0.1


@dataclass
class FairQueue:
    capacity: int
    inflight: int = 0
    clock: float = 0.0
    _tags: dict[tuple[str, str], float] = field(default_factory=dict)
    _heap: list[tuple[float, int, asyncio.Future[None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    async def acquire(self, *, tenant: str, weight: int, priority: str, timeout: float) -> None:
        """Wait for a slot (fair order under contention); 429 ``pool_saturated`` on timeout."""
        if self.inflight < self.capacity and not self._heap:
            self.inflight += 1
            return
        share = weight * (BATCH_WEIGHT_FACTOR if priority == "batch" else 1.0)
        key = (tenant, priority)
        tag = max(self.clock, self._tags.get(key, 0.0)) + 1.0 / share
        self._tags[key] = tag
        if len(self._tags) > 10_000:
            self._tags = {k: v for k, v in self._tags.items() if v > self.clock}
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (tag, next(self._seq), waiter))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted just as we gave up: hand the slot on
            waiter.cancel()
            raise GatewayError(
                429,
                "pool_saturated",
                "The model's workers are saturated; retry shortly.",
                headers={"Retry-After": "1"},
            ) from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()
            waiter.cancel()
            raise

    def release(self) -> None:
        """Hand the slot to the waiter with the smallest tag (or free it)."""
        while self._heap:
            tag, _, waiter = heapq.heappop(self._heap)
            if waiter.done():  # timed out or cancelled
                continue
            self.clock = tag
            waiter.set_result(None)
            return
        self.inflight = max(0, self.inflight - 1)

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, w in self._heap if not w.done())


_queues: LoopLocal[dict[str, FairQueue]] = LoopLocal(dict)


def queue_for(pool: str, capacity: int) -> FairQueue:
    """The process's queue of ``pool`` on the running loop, its capacity kept current."""
    queues = _queues.get()
    queue = queues.get(pool)
    if queue is None:
        queue = queues[pool] = FairQueue(capacity=capacity)
    queue.capacity = capacity
    return queue
