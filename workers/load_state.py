"""In-flight requests per worker, shared by every gateway replica through Redis.

Each replica counts what it sent itself (exact, local) and publishes the counts in one
Redis hash, ``cp:load:inflight``, field ``<replica>|<worker>``; it stamps its liveness
in ``cp:load:beat`` (replica -> unix time). A reader sums the fields of replicas stamped
within ``REPLICA_TTL`` seconds, so a replica that dies (and never decrements) stops
counting after that window, and its fields are deleted by whoever notices.

Writes are ``HINCRBY`` fired after the local update, off the request path; the read is
part of the routing lookup's script (``controlplane/redis/lua/kv_route.lua``), so the hot path pays
one Redis round trip for both the KV index and the fleet's load.

Reservations close the gap between a routing decision and that count: a request is
counted only once the gateway sends it (after rate limits, fair share and the budget
hold), while other replicas route in between. So the routing decision itself reserves
one slot on the chosen worker (``cp:load:r:<worker>``, a sorted set: member per request,
score = expiry), sent right after the decision; the gateway's ``+1`` removes its oldest
reservation for that worker in the same pipeline, and a request that was refused before
sending (or failed over) lets its reservation expire after ``RESERVE_SECONDS``.
"""

from __future__ import annotations

from typing import Any

from controlplane.redis import keys

INFLIGHT_KEY = keys.LOAD_INFLIGHT
BEAT_KEY = keys.LOAD_BEAT
REPLICA_TTL = 10.0
RESERVED_PREFIX = keys.LOAD_RESERVED
RESERVE_SECONDS = 2.0
# The fleet's share of traffic per worker, for the balance bound: worker -> "count seq",
# a request count decayed by (1 - 1/window) per routing decision fleet-wide (seq counts
# them in DECISIONS_KEY), so it needs no clock and every replica updates it in the
# routing script. Decisions, not seconds: the bound means the same on a slow machine.
RATE_KEY = keys.LOAD_RATE
DECISIONS_KEY = keys.LOAD_DECISIONS
reserved_key = keys.load_reserved


def queue_add(
    pipe: Any, *, replica: str, worker: str, delta: int, now: float, reservation: str = ""
) -> None:
    pipe.hincrby(INFLIGHT_KEY, f"{replica}|{worker}", delta)
    pipe.hset(BEAT_KEY, replica, str(now))
    if reservation:  # the request is counted now: its reservation has done its job
        pipe.zrem(reserved_key(worker), reservation)
