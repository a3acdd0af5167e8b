"""In-flight requests per worker, shared by every gateway replica through Redis.

Each replica counts what it sent itself (exact, local) and publishes the counts in one
Redis hash, ``cp:load:inflight``, field ``<replica>|<worker>``; it stamps its liveness
in ``cp:load:beat`` (replica -> unix time). A reader sums the fields of replicas stamped
within ``REPLICA_TTL`` seconds, so a replica that dies (and never decrements) stops
counting after that window, and its fields are deleted by whoever notices.

Writes are ``HINCRBY`` fired after the local update, off the request path; the read is
batched into the routing lookup's pipeline (:func:`queue_read`), so the hot path pays one
Redis round trip for both the KV index and the fleet's load.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

INFLIGHT_KEY = "cp:load:inflight"
BEAT_KEY = "cp:load:beat"
REPLICA_TTL = 10.0


def queue_add(pipe: Any, *, replica: str, worker: str, delta: int, now: float) -> None:
    pipe.hincrby(INFLIGHT_KEY, f"{replica}|{worker}", delta)
    pipe.hset(BEAT_KEY, replica, str(now))


def queue_read(pipe: Any) -> None:
    pipe.hgetall(INFLIGHT_KEY)
    pipe.hgetall(BEAT_KEY)


def parse_read(
    inflight: dict[bytes, bytes],
    beats: dict[bytes, bytes],
    *,
    now: float,
    workers: Sequence[str] | None = None,
) -> tuple[dict[str, int], list[bytes]]:
    """``(fleet in-flight per worker, fields of dead replicas)`` from :func:`queue_read`."""
    live = {_s(r) for r, stamp in beats.items() if now - float(stamp) <= REPLICA_TTL}
    totals: dict[str, int] = {}
    dead: list[bytes] = []
    for raw_field, value in inflight.items():
        replica, _, worker = _s(raw_field).partition("|")
        if replica not in live:
            dead.append(raw_field)
            continue
        if workers is None or worker in workers:
            totals[worker] = totals.get(worker, 0) + max(0, int(value))
    return totals, dead


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def fleet_inflight(client: Any) -> dict[str, int]:
    """The fleet's in-flight counts (redis.asyncio client), for dashboards and tests."""
    pipe = client.pipeline(transaction=False)
    queue_read(pipe)
    inflight, beats = await pipe.execute()
    totals, _dead = parse_read(inflight, beats, now=time.time())
    return totals
