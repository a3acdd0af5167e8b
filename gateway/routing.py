"""Choosing a worker: prefix-affine, load-bounded, memory-aware, with failover order.

1. A request naming a cache goes to the workers the cache was warmed on (rendezvous
   order of its routing key — the same order the warmer used).
2. Otherwise the routing key is a hash chain over the first blocks of the *salted*
   prompt (characters stand in for tokens: ``block_size × 4`` characters a block, so no
   tokenizer is needed on the hot path), or the session id when the client sends
   ``X-Session-Id``. A prefix index remembers which worker last served each chain, so the
   longest remembered chain wins; a new prefix falls to rendezvous hashing of its first
   block.
3. Bounded load: a worker with more than ``(1 + ε) × average`` in-flight requests is
   skipped (consistent hashing with bounded loads), as is one whose KV usage is above the
   pressure threshold while a cooler one exists.
The result is an ordered list: the gateway fails over to the next on connection errors.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from gateway.directory import WorkerView
from workers.routing import rendezvous_order

CHARS_PER_TOKEN = 4
MAX_CHAIN_BLOCKS = 32
EPSILON = 0.25
PRESSURE = 0.85


def prefix_chain(
    text: str, *, salt: str, block_size: int, blocks: int = MAX_CHAIN_BLOCKS
) -> list[str]:
    """Hashes of the first full blocks of ``text``; the salt enters block 0 only, as in vLLM."""
    width = block_size * CHARS_PER_TOKEN
    chain: list[str] = []
    parent = salt
    for i in range(min(blocks, len(text) // width)):
        block = text[i * width : (i + 1) * width]
        parent = hashlib.blake2b(f"{parent}\x00{block}".encode(), digest_size=12).hexdigest()
        chain.append(parent)
    return chain


class PrefixIndex:
    """Chain hash → worker that last received it (LRU-bounded; approximate by design)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, str] = OrderedDict()

    def longest(self, chain: Sequence[str]) -> tuple[str | None, int]:
        for depth in range(len(chain), 0, -1):
            worker = self._entries.get(chain[depth - 1])
            if worker is not None:
                return worker, depth
        return None, 0

    def record(self, chain: Sequence[str], worker: str) -> None:
        for h in chain:
            self._entries[h] = worker
            self._entries.move_to_end(h)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def forget_worker(self, worker: str) -> None:
        for key in [k for k, v in self._entries.items() if v == worker]:
            del self._entries[key]


def order_candidates(
    *, key: str, workers: Sequence[WorkerView], inflight: dict[str, int],
    preferred: str | None = None,
) -> list[WorkerView]:  # fmt: skip
    """Failover order: preferred (if not overloaded), then rendezvous order, bounded."""
    if not workers:
        return []
    ranked = rendezvous_order(key, workers)
    if preferred is not None:
        ranked.sort(key=lambda w: w.name != preferred)
    total = sum(inflight.get(w.name, 0) for w in workers) + 1
    bound = (1 + EPSILON) * total / len(workers)
    cool = [w for w in ranked if w.kv_usage < PRESSURE]
    pool = cool or ranked
    within = [w for w in pool if inflight.get(w.name, 0) + 1 <= max(bound, 1)]
    rest = [w for w in ranked if w not in within]
    return within + rest


def pool_under_pressure(workers: Sequence[WorkerView]) -> bool:
    """The pool's KV usage (mean of its workers) is above the pressure threshold."""
    return bool(workers) and sum(w.kv_usage for w in workers) / len(workers) > PRESSURE
