"""Approximate routing: a per-process prefix index guessed from characters.

The routing key is a hash chain over the first blocks of the *salted* prompt (characters
stand in for tokens: ``block_size × 4`` characters a block, so no tokenizer is needed),
or the session id when the client sends ``X-Session-Id``. A prefix index remembers the
last few workers that served each chain (most recent first), so the holders of the
longest remembered chain come first; a new prefix falls to rendezvous hashing of its
first block. Bounded load: a worker that would exceed ``⌈(1 + ε) × average⌉`` in-flight
requests is skipped (consistent hashing with bounded loads), as is one whose KV usage is
above the pressure threshold while a cooler one exists. A request that spills off a busy
holder makes its new worker one more holder instead of replacing the old one, so a hot
prefix settles on a few workers and later spills find it there too.

This is the fallback of the event-exact mode (``gateway.routing.exact``) whenever the KV
index is stale, Redis is unreachable or the engine's tokenizer is unknown here.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence

from gateway.directory import WorkerView
from gateway.routing.decision import RouteDecision
from workers.routing import rendezvous_order

CHARS_PER_TOKEN = 4
MAX_CHAIN_BLOCKS = 32
EPSILON = 0.25
HOLDERS = 3  # workers remembered per chain hash
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
    """Chain hash → the last ``HOLDERS`` workers that received it, most recent first
    (LRU-bounded; approximate by design: a holder may have evicted the blocks since)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def holders(self, chain: Sequence[str]) -> tuple[tuple[str, ...], int]:
        """The holders of the longest remembered prefix of ``chain`` and its depth."""
        for depth in range(len(chain), 0, -1):
            workers = self._entries.get(chain[depth - 1])
            if workers is not None:
                return workers, depth
        return (), 0

    def longest(self, chain: Sequence[str]) -> tuple[str | None, int]:
        """The most recent holder of the longest remembered prefix and its depth."""
        workers, depth = self.holders(chain)
        return (workers[0] if workers else None), depth

    def record(self, chain: Sequence[str], worker: str) -> None:
        for h in chain:
            held = self._entries.get(h, ())
            self._entries[h] = (worker, *(w for w in held if w != worker))[:HOLDERS]
            self._entries.move_to_end(h)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every prefix (a fresh gateway's state)."""
        self._entries.clear()

    def forget_worker(self, worker: str) -> None:
        for key, held in list(self._entries.items()):
            if worker in held:
                rest = tuple(w for w in held if w != worker)
                if rest:
                    self._entries[key] = rest
                else:
                    del self._entries[key]


def order_candidates(
    *,
    key: str,
    workers: Sequence[WorkerView],
    inflight: dict[str, int],
    preferred: str | Sequence[str] | None = None,
    epsilon: float = EPSILON,
) -> list[WorkerView]:
    """Failover order: preferred workers (in their order) if not overloaded, then rendezvous
    order; a worker over the load bound or the KV pressure threshold goes to the back."""
    if not workers:
        return []
    ranked = rendezvous_order(key, workers)
    if preferred:
        first = (preferred,) if isinstance(preferred, str) else tuple(preferred)
        ranked.sort(key=lambda w: first.index(w.name) if w.name in first else len(first))
    total = sum(inflight.get(w.name, 0) for w in workers) + 1
    # The ceiling is the bound of Mirrokni et al.: with few requests in flight, a plain
    # (1 + ε) × average would already turn away a worker at the average.
    bound = math.ceil((1 + epsilon) * total / len(workers))
    cool = [w for w in ranked if w.kv_usage < PRESSURE]
    pool = cool or ranked
    within = [w for w in pool if inflight.get(w.name, 0) + 1 <= bound]
    rest = [w for w in ranked if w not in within]
    return within + rest


def pool_under_pressure(workers: Sequence[WorkerView]) -> bool:
    """The pool's KV usage (mean of its workers) is above the pressure threshold."""
    return bool(workers) and sum(w.kv_usage for w in workers) / len(workers) > PRESSURE


def approximate(
    *,
    chain: list[str],
    workers: Sequence[WorkerView],
    load: dict[str, int],
    session: str | None,
    tenant_id: str,
    text: str,
    approx_index: PrefixIndex,
    block_size: int,
) -> RouteDecision:
    """The character-based decision: holders of the longest remembered chain first, under
    the bounded-load rule of :func:`order_candidates` (the fallback of the exact mode)."""
    preferred, depth = approx_index.holders(chain)
    key = (
        f"s:{tenant_id}:{session}"
        if session
        else (chain[0] if chain else f"{tenant_id}:{text[:256]}")
    )
    candidates = order_candidates(key=key, workers=workers, inflight=load, preferred=preferred)
    available = depth * block_size
    routed = available if preferred and candidates and candidates[0].name in preferred else 0
    return RouteDecision(
        candidates=candidates,
        mode="approximate",
        reason="",
        available_tokens=available,
        routed_tokens=routed,
        chain=chain,
        holders=tuple(preferred),
    )
