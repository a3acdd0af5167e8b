"""Every Redis key layout of Cacheplane, named once (docs/redis.md lists them).

One builder per key family; code outside ``controlplane.redis`` never formats a key
itself (``tests/controlplane/test_redis_owner.py`` checks that statically and by scanning
Redis after exercising the writers). Where the data is a tenant's, the builder takes what
identifies it: a budget period id (a row of one tenant), a rate-limit scope naming the
key or the tenant. Layouts are unchanged from before this package existed, so a running
deployment keeps its counters across the upgrade.

Prefixes that operators may move (``CACHEPLANE_BUDGET_REDIS_PREFIX``,
``CACHEPLANE_GATEWAY_RATELIMIT_PREFIX``, ``CACHEPLANE_BILLING_USAGE_QUEUE_KEY``) are read
from settings on every call, as before (tests override them).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class KeyFamily:
    """One key layout: a name, the glob its keys match, and who writes them."""

    name: str
    pattern: str
    owner: str


def _budget() -> str:
    return str(settings.CACHEPLANE_BUDGET_REDIS_PREFIX)


def _ratelimit() -> str:
    return str(settings.CACHEPLANE_GATEWAY_RATELIMIT_PREFIX)


def _usage() -> str:
    return str(settings.CACHEPLANE_BILLING_USAGE_QUEUE_KEY)


# --- billing: budget holds (billing.services.budget_reservations) -------------------------


def budget_period(period_id: int) -> tuple[str, str, str]:
    """(hash, holds, amounts) of one budget period: counters, hold ids by expiry (ms),
    hold id → amount."""
    base = f"{_budget()}:{period_id}"
    return base, f"{base}:holds", f"{base}:amounts"


def budget_periods_loaded() -> str:
    """Set of the period ids ever loaded (for the expiry sweep)."""
    return f"{_budget()}:periods"


def budget_settle_queue() -> str:
    """List of settlement messages waiting for the flush."""
    return f"{_budget()}:settle"


def budget_settle_claims() -> str:
    """Sorted set of settle batches being flushed, scored by claim time."""
    return f"{budget_settle_queue()}:claims"


def budget_settle_batch(batch_id: str) -> str:
    """One claimed batch of settlements."""
    return f"{budget_settle_queue()}:batch:{batch_id}"


def budget_hold_done(hold_id: str) -> str:
    """Marker that a hold was settled (a replayed settle books nothing)."""
    return f"{_budget()}:done:{hold_id}"


# --- gateway: rate limits (gateway.ratelimit) ----------------------------------------------


def ratelimit_scope_for_key(key_id: str) -> str:
    """The rate-limit scope of one API key."""
    return f"k:{key_id}"


def ratelimit_scope_for_tenant(tenant_id: str) -> str:
    """The rate-limit scope of a whole tenant."""
    return f"t:{tenant_id}"


def ratelimit_scope_is_key(scope: str) -> bool:
    return scope.startswith("k:")


def ratelimit(scope: str) -> tuple[str, str]:
    """(token-bucket hash, in-flight sorted set) of one scope."""
    base = f"{_ratelimit()}:{scope}"
    return f"{base}:bucket", f"{base}:inflight"


# --- billing: price changes (a pub/sub channel, not a key) --------------------------------


def prices_changed_channel() -> str:
    """Pub/sub channel billing publishes to after every committed price change; each
    gateway process empties its price cache on a message (``gateway.pricing``)."""
    return "cacheplane:prices:changed"


# --- billing: the usage queue (billing.services.usage) -------------------------------------


def usage_queue() -> str:
    """List of msgpack usage messages from the gateway, drained by the flush."""
    return _usage()


def usage_claims() -> str:
    """Sorted set of usage batches being flushed, scored by claim time."""
    return f"{_usage()}:claims"


def usage_batch(batch_id: str) -> str:
    """One claimed batch of usage messages."""
    return f"{_usage()}:batch:{batch_id}"


def usage_flush_lock() -> str:
    """The flush's ``redis.lock`` (one flusher at a time)."""
    return f"{_usage()}:lock"


# --- caches: hit counters (caches.services.hits) -------------------------------------------

CACHE_HITS = "cacheplane:cache-hits"


def cache_hits() -> str:
    """Hash ``<cache id>:count`` / ``<cache id>:tokens`` → hits since the last flush."""
    return CACHE_HITS


def cache_hits_batch(batch_id: str) -> str:
    """The live hash renamed for one flush (kept if that flush dies)."""
    return f"{CACHE_HITS}:flush:{batch_id}"


def cache_hit_fields(cache_id: str) -> tuple[str, str]:
    """(count field, cached tokens field) of one cache in :func:`cache_hits`."""
    return f"{cache_id}:count", f"{cache_id}:tokens"


# --- tenants: API-key and login guessing (tenants.services.throttling / failures) ---------

THROTTLE = "cacheplane:throttle:api_key"


def throttle_api_key(source: str) -> tuple[str, str, str, str]:
    """(failures, lock, refused, refused-gate) of one client source."""
    base = f"{THROTTLE}:{source}"
    return f"{base}:failures", f"{base}:lock", f"{base}:refused", f"{base}:refused-gate"


@dataclass(frozen=True)
class ThrottleKindKeys:
    """Counters of another kind of failure (``login``, ...) from one source."""

    failed: str  # refusals coalesced into one audit row per gate period
    failed_gate: str
    failures: str  # failures towards the lock
    lock: str


def throttle_kind(kind: str, source: str) -> ThrottleKindKeys:
    """Under the key throttle's prefix, so ``api_key_throttle_reset(all_sources=True)``
    clears these too."""
    base = f"{THROTTLE}:{kind}:{source}"
    return ThrottleKindKeys(
        f"{base}:failed", f"{base}:failed-gate", f"{base}:failures", f"{base}:lock"
    )


def throttle_anonymous(source: str) -> tuple[str, str]:
    """(refused, refused-gate) of the anonymous (no key) requests of one source."""
    base = f"{THROTTLE}:anonymous:{source}"
    return f"{base}:refused", f"{base}:refused-gate"


def throttle_all() -> str:
    """Glob of every throttle key (the reset of all sources)."""
    return f"{THROTTLE}:*"


# --- controlplane: task health and worker heartbeats ---------------------------------------

TASK_HEALTH = "cacheplane:task-health:"
HEARTBEAT = "cacheplane:worker-heartbeat:"


def task_health(task_name: str) -> str:
    """Hash of one periodic task's last success/failure and counts."""
    return f"{TASK_HEALTH}{task_name}"


def worker_heartbeat(hostname: str) -> str:
    """A Celery worker's heartbeat (expires when it stops beating)."""
    return f"{HEARTBEAT}{hostname}"


# --- workers: the KV-event index (workers.kv_index) ----------------------------------------

KV = "cp:kv:"
KV_LIVE = KV + "live"
KV_CHECK = KV + "check"


def kv_worker(worker: str) -> str:
    """Hash: block hash → copies the worker holds."""
    return f"{KV}w:{worker}"


def kv_check_fields(worker: str) -> tuple[str, str]:
    """(matched, mismatched) fields of one worker in :data:`KV_CHECK`."""
    return f"{worker}:ok", f"{worker}:bad"


def kv_pending(worker: str) -> str:
    """Hash: block hash → time until which a routing claim counts as held."""
    return f"{KV}p:{worker}"


# --- workers: the fleet's load (workers.load_state) ----------------------------------------

LOAD_INFLIGHT = "cp:load:inflight"
LOAD_BEAT = "cp:load:beat"
LOAD_RESERVED = "cp:load:r:"
LOAD_RATE = "cp:load:rate"
LOAD_DECISIONS = "cp:load:decisions"


def load_reserved(worker: str) -> str:
    """Sorted set of routing reservations on one worker, scored by expiry."""
    return f"{LOAD_RESERVED}{worker}"


# --- gateway: the cache-breakpoint autopilot's reuse history (gateway.adapters.autopilot) --

AUTOPILOT = "cacheplane:autopilot:"


def autopilot_history(tenant_id: str, model: str, hour: int) -> str:
    """Hash of one tenant's prefix sightings on one hosted model in one hour bucket
    (prefix digest → last seen and gaps; ``_ends``/``_continued`` counters)."""
    return f"{AUTOPILOT}{tenant_id}:{model}:{hour}"


#: Every key family, ours and the libraries' that share the database. The Redis test
#: scans the database after exercising the writers: each key must match one of these.
FAMILIES: tuple[KeyFamily, ...] = (
    KeyFamily("budget period", "{budget}:[0-9]*", "billing"),
    KeyFamily("budget periods loaded", "{budget}:periods", "billing"),
    KeyFamily("budget settle queue", "{budget}:settle*", "billing"),
    KeyFamily("budget hold done", "{budget}:done:*", "billing"),
    KeyFamily("rate limit", "{ratelimit}:[kt]:*", "gateway"),
    KeyFamily("usage queue", "{usage}*", "billing"),
    KeyFamily("cache hits", "cacheplane:cache-hits*", "caches"),
    KeyFamily("throttle", "cacheplane:throttle:api_key:*", "tenants"),
    KeyFamily("task health", "cacheplane:task-health:*", "controlplane"),
    KeyFamily("worker heartbeat", "cacheplane:worker-heartbeat:*", "controlplane"),
    KeyFamily("kv index", "cp:kv:*", "workers"),
    KeyFamily("fleet load", "cp:load:*", "workers"),
    KeyFamily("autopilot history", "cacheplane:autopilot:*", "gateway"),
    # Owned by libraries, configured in settings_services.py: not ours to lay out.
    KeyFamily("channels", "cacheplane:asgi*", "channels_redis"),
    KeyFamily("celery", "celery*", "celery"),
    KeyFamily("kombu", "_kombu*", "celery"),
    KeyFamily("celery unacked", "unacked*", "celery"),
)


def family_patterns() -> dict[str, str]:
    """Family name → glob, with the configurable prefixes filled in."""
    fill = {"budget": _budget(), "ratelimit": _ratelimit(), "usage": _usage()}
    return {f.name: f.pattern.format(**fill) for f in FAMILIES}
