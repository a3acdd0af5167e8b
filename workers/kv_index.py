"""The fleet's KV-event index in Redis: which worker holds which salted block hash.

Design (see docs/gateway/routing.md): one small indexer process
(:mod:`workers.kv_indexer`) subscribes to every worker's vLLM KV-event stream and writes
this index; every gateway replica reads it with one pipelined Redis round trip per request
(:func:`kv_lookup`). Redis is already in every deployment (Celery, Channels, budgets), so
the index adds no new service the replicas must discover, and any number of replicas see
the same state.

Keys (all under ``cp:kv:``):

- ``cp:kv:w:<worker>``: HASH, event block hash (decimal int, as vLLM sends it) -> how many
  copies the worker holds. vLLM may cache identical blocks twice (no dedup), so a
  ``BlockRemoved`` decrements and the field goes only at zero.
- ``cp:kv:live``: HASH, worker -> unix time the indexer last confirmed its stream in sync.
  A worker whose entry is older than :data:`STALE_SECONDS` (or missing) is not trusted:
  the gateway routes on its character-based guess instead.
- ``cp:kv:p:<worker>``: HASH, block hash -> unix time until which it counts as held: the
  *pending placements*. The routing decision that sends a prompt to a worker claims the
  blocks the worker does not hold yet, so every replica sees the routing intent at once,
  long before the worker has prefilled and its ``BlockStored`` arrives (which deletes the
  claim: the index has it then). A claim whose request never ran expires after
  :data:`PENDING_SECONDS`; the whole hash expires when traffic stops.

The hot path is one script (``controlplane/redis/lua/kv_route.lua``, one round trip,
atomic): it reads the
index's freshness, per worker the blocks held and held-or-claimed (the longest consecutive
run from block 0, counted inside Redis, so the reply is a few integers a worker instead
of one per block) and the fleet's in-flight counts (``workers.load_state``), makes the
exact-mode decision, and records it (the claim and a load reservation) before any other
replica's lookup can run.

Dropping a worker (it left the registry, failed a probe, restarted, or its stream lost
events the replay could not fill) is one ``DEL`` + ``HDEL``: it disappears at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from controlplane.redis import keys
from controlplane.redis.fleet import kv_prune_pending, kv_remove_blocks_queue

PREFIX = keys.KV
LIVE_KEY = keys.KV_LIVE
# HASH, "<worker>:ok" / "<worker>:bad" -> how many block-0 hashes the indexer recomputed
# from a BlockStored event's own tokens and extra keys, and whether they matched what the
# worker sent (workers.kv_indexer.check_first_blocks): the console's "hashes match".
CHECK_KEY = keys.KV_CHECK
STALE_SECONDS = 5.0
PENDING_SECONDS = 5.0  # a claim outlives any prefill; BlockStored normally removes it first

worker_key = keys.kv_worker
pending_key = keys.kv_pending


def apply_events(
    client: Any,
    *,
    worker: str,
    events: Iterable[dict[str, Any]],
    mediums: tuple[str | None, ...] = ("GPU", None),
) -> int:
    """Apply decoded KV events (``workers.engine.kv_events.decode_batch`` dicts) for ``worker``.

    One pipeline per call; events apply in order, so an ``AllBlocksCleared`` followed by
    ``BlockStored`` in the same batch leaves the stored blocks. Blocks on tiers other than
    ``mediums`` (CPU/disk offload) are ignored: a GPU hit is what prefill skips. Returns
    the number of events applied.
    """
    key, pending = worker_key(worker), pending_key(worker)
    pipe = client.pipeline(transaction=False)
    applied = 0
    for event in events:
        kind = event.get("type")
        if kind == "BlockStored" and event.get("medium") in mediums:
            stored = [_field(h) for h in event.get("block_hashes") or ()]
            for h in stored:
                pipe.hincrby(key, h, 1)
            if stored:  # the claim is now a fact: the index answers for these blocks
                pipe.hdel(pending, *stored)
        elif kind == "BlockRemoved" and event.get("medium") in mediums:
            hashes = [_field(h) for h in event.get("block_hashes") or ()]
            if hashes:
                kv_remove_blocks_queue(pipe, worker=worker, hashes=hashes)
        elif kind == "AllBlocksCleared":
            pipe.delete(key)
        else:
            continue
        applied += 1
    pipe.execute()
    return applied


def mark_live(client: Any, *, workers: Sequence[str], now: float | None = None) -> None:
    """Record that the indexer's streams for ``workers`` are in sync as of ``now``."""
    if workers:
        stamp = str(now if now is not None else time.time())
        client.hset(LIVE_KEY, mapping=dict.fromkeys(workers, stamp))


def drop_worker(client: Any, *, worker: str) -> None:
    """Forget everything about ``worker``: its blocks and its liveness (at once)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(worker_key(worker), pending_key(worker))
    pipe.hdel(LIVE_KEY, worker)
    pipe.execute()


def record_hash_check(client: Any, *, worker: str, matched: int, mismatched: int) -> None:
    """Add one batch's hash-check outcome for ``worker`` (see :data:`CHECK_KEY`)."""
    pipe = client.pipeline(transaction=False)
    if matched:
        pipe.hincrby(CHECK_KEY, keys.kv_check_fields(worker)[0], matched)
    if mismatched:
        pipe.hincrby(CHECK_KEY, keys.kv_check_fields(worker)[1], mismatched)
    pipe.execute()


def worker_event_status(
    client: Any, *, workers: Sequence[str], now: float | None = None
) -> dict[str, dict[str, Any]]:
    """Per worker: events ``live`` (stamped within STALE_SECONDS), the stamp's age, the
    blocks the index holds for it and the hash-check counts. For the console."""
    names = list(workers)
    if not names:
        return {}
    stamp_now = now if now is not None else time.time()
    pipe = client.pipeline(transaction=False)
    pipe.hmget(LIVE_KEY, names)
    pipe.hgetall(CHECK_KEY)
    for name in names:
        pipe.hlen(worker_key(name))
    stamps, checks, *sizes = pipe.execute()
    checks = {_text(k): int(v) for k, v in (checks or {}).items()}
    out: dict[str, dict[str, Any]] = {}
    for name, stamp, size in zip(names, stamps, sizes, strict=True):
        age = stamp_now - float(stamp) if stamp is not None else None
        out[name] = {
            "live": age is not None and age <= STALE_SECONDS,
            "age_seconds": round(age, 1) if age is not None else None,
            "resident_blocks": int(size or 0),
            "hash_ok": checks.get(keys.kv_check_fields(name)[0], 0),
            "hash_bad": checks.get(keys.kv_check_fields(name)[1], 0),
        }
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def prune_pending(client: Any, *, workers: Sequence[str], now: float | None = None) -> int:
    """Delete expired claims (requests that were routed but never ran); the indexer's job."""
    stamp = now if now is not None else time.time()
    return sum(kv_prune_pending(client, worker=w, now=stamp) for w in workers)


def worker_forget(worker: str) -> None:
    """Hook for the registry: a worker that was removed or went unhealthy leaves the index.

    Best effort (Redis down means the index is stale anyway, and the gateway then falls
    back to approximate routing once ``cp:kv:live`` ages out).
    """
    from controlplane.ops import redis_client

    try:
        drop_worker(redis_client(), worker=worker)
    except Exception:  # a hook must never fail the registry write
        return


def _field(block_hash: int | bytes) -> str:
    # With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 vLLM sends raw digests; keep the same
    # low-64-bit int form the default mode sends, so one request hash matches both.
    if isinstance(block_hash, bytes | bytearray):
        return str(int.from_bytes(bytes(block_hash)[-8:], "big"))
    return str(block_hash)


def queue_lookup(pipe: Any, *, workers: Sequence[str], hashes: Sequence[int]) -> None:
    """Queue the commands of one lookup on ``pipe`` (so callers can batch other reads)."""
    pipe.hmget(LIVE_KEY, list(workers))
    fields = [str(h) for h in hashes]
    for worker in workers:
        if fields:
            pipe.hmget(worker_key(worker), fields)
        else:
            pipe.exists(worker_key(worker))


def parse_lookup(
    results: Sequence[Any], *, workers: Sequence[str], hashes: Sequence[int], now: float
) -> tuple[dict[str, int], bool]:
    """``(matched blocks per worker, all fresh)`` from the replies :func:`queue_lookup` queued.

    The match is the longest *consecutive* run from block 0: attention is causal, so a
    block after a miss cannot be reused even if the worker holds it.
    """
    live = results[0]
    fresh = all(
        stamp is not None and now - float(stamp) <= STALE_SECONDS for stamp in live
    ) and bool(workers)
    depths: dict[str, int] = {}
    for worker, reply in zip(workers, results[1:], strict=True):
        depth = 0
        if hashes:
            for count in reply:
                if count is None or int(count) <= 0:
                    break
                depth += 1
        depths[worker] = depth
    return depths, fresh


async def kv_lookup(
    client: Any, *, workers: Sequence[str], hashes: Sequence[int]
) -> tuple[dict[str, int], bool]:
    """Matched prefix blocks per worker and whether the index is fresh for all of them.

    ``client`` is a ``redis.asyncio`` client; one pipelined round trip.
    """
    pipe = client.pipeline(transaction=False)
    queue_lookup(pipe, workers=workers, hashes=hashes)
    results = await pipe.execute()
    return parse_lookup(results, workers=workers, hashes=hashes, now=time.time())
