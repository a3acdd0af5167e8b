"""The usage ledger: recorded on the request path into Redis, flushed to PostgreSQL in batches.

Request path: ``usage_record`` validates the counts and appends one compact message to a
Redis list (one ``RPUSH``, no SQL). Flush (``usage_flush_task``, every few seconds):

1. a Lua script atomically moves up to ``batch`` messages from the queue into a batch
   list and registers it (with its claim time) in a sorted set, so a worker that dies
   mid-flush loses nothing: an unfinished batch is claimed again after its lease;
2. the batch is priced in memory (the price version effective at each row's
   ``occurred_at``), ``COPY``ed (binary) into a session-local staging table and moved
   with ONE statement: ``INSERT ... SELECT FROM stage ON CONFLICT (tenant_id,
   request_id) DO NOTHING RETURNING ...`` feeding an ``INSERT ... ON CONFLICT DO
   UPDATE`` that increments the per-minute and per-day rollups for the rows actually
   inserted. A replayed message is therefore a no-op, rollups included;
3. after commit the batch list is deleted (a crash in between replays the batch: no-op).

Rollup writers (flush and reprice) take one transaction-level advisory lock, so their
increments never deadlock or interleave.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgspec
from django.conf import settings
from django.db import connection, transaction
from redis.exceptions import LockNotOwnedError

from billing.errors import InvalidUsage
from billing.models import Provider, UsageKind, UsageStatus
from billing.pricing import Cost, UsageCounts, cache_creation_cost, gpu_cost, token_cost
from billing.selectors.prices import PriceIndex
from controlplane import ops
from tenants.models import Tenant

logger = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ROLLUP_LOCK = 0x62696C6C  # pg advisory lock id shared by every rollup writer ("bill")

_CLAIM_SCRIPT = """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items == 0 then return 0 end
redis.call('LTRIM', KEYS[1], #items, -1)
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + 999, #items)))
end
redis.call('ZADD', KEYS[3], ARGV[2], KEYS[2])
return #items
"""


class _Message(msgspec.Struct, array_like=True):
    """One usage row on the wire (positional: small and fast to encode)."""

    tenant_id: str
    request_id: str
    at_us: int
    provider: str
    model: str
    worker: str
    pool: str
    api_key_id: str | None
    principal_id: str | None
    cache_id: str | None
    prompt_tokens: int
    cached_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int
    output_tokens: int
    ttft_ms: int | None
    latency_ms: int | None
    status: str
    stream: bool
    # Appended later: defaults let messages queued by an older release still decode.
    thinking_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_cached_read_tokens: int = 0
    audio_output_tokens: int = 0
    kind: str = UsageKind.REQUEST
    ttl_seconds: int = 0

    def counts(self) -> UsageCounts:
        return UsageCounts(
            self.prompt_tokens,
            self.cached_read_tokens,
            self.cache_write_5m_tokens,
            self.cache_write_1h_tokens,
            self.output_tokens,
            self.thinking_tokens,
            self.audio_prompt_tokens,
            self.audio_cached_read_tokens,
            self.audio_output_tokens,
        )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Message)


def queue_key() -> str:
    return settings.CACHEPLANE_BILLING_USAGE_QUEUE_KEY


def _keys() -> tuple[str, str]:
    base = queue_key()
    return base, f"{base}:claims"


def _optional_uuid(name: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidUsage(f"{name} must be a UUID.", details={"field": name}) from None


def _optional_ms(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise InvalidUsage(f"{name} must be a non-negative integer.", details={"field": name})
    return value


def usage_message(
    *,
    tenant: Tenant,
    request_id: str,
    provider: str,
    model: str,
    occurred_at: datetime,
    prompt_tokens: int,
    cached_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    output_tokens: int = 0,
    ttft_ms: int | None = None,
    latency_ms: int | None = None,
    status: str = UsageStatus.OK,
    api_key_id: str | None = None,
    principal_id: str | None = None,
    cache_id: str | None = None,
    worker: str = "",
    pool: str = "",
    stream: bool = False,
    thinking_tokens: int = 0,
    audio_prompt_tokens: int = 0,
    audio_cached_read_tokens: int = 0,
    audio_output_tokens: int = 0,
    kind: str = UsageKind.REQUEST,
    ttl_seconds: int = 0,
) -> bytes:
    """Validate one request's usage and encode it for the queue (no I/O).

    Partial work (an aborted or disconnected stream, an upstream error after tokens were
    produced) is recorded like any request, with the counts of what was streamed and a
    non-``ok`` status: the provider bills it, so the ledger prices it in full.
    ``kind="cache_create"`` books the write of an explicit cache (``ttl_seconds`` picks
    the write tier); see :func:`cache_creation_record`.
    """
    counts = UsageCounts(
        prompt_tokens,
        cached_read_tokens,
        cache_write_5m_tokens,
        cache_write_1h_tokens,
        output_tokens,
        thinking_tokens,
        audio_prompt_tokens,
        audio_cached_read_tokens,
        audio_output_tokens,
    )
    problems = counts.problems()
    if any(
        v >= 2**31
        for v in (prompt_tokens, output_tokens, thinking_tokens, audio_output_tokens)
        if isinstance(v, int)
    ):
        problems.append("token counts must be below 2^31")
    if kind not in UsageKind.values:
        problems.append(f"unknown kind {kind!r}")
    if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or ttl_seconds < 0:
        problems.append("ttl_seconds must be a non-negative integer")
    if problems:
        raise InvalidUsage("; ".join(problems), details={"problems": problems})
    if provider not in Provider.values:
        raise InvalidUsage(f"Unknown provider {provider!r}.", details={"provider": provider})
    if status not in UsageStatus.values:
        raise InvalidUsage(f"Unknown status {status!r}.", details={"status": status})
    if not request_id or len(request_id) > 128:
        raise InvalidUsage("request_id must be 1-128 characters.")
    if not model or len(model) > 200 or len(worker) > 200 or len(pool) > 100:
        raise InvalidUsage("model (1-200), worker (200) or pool (100) is too long.")
    if cache_id is not None and (not cache_id or len(str(cache_id)) > 100):
        raise InvalidUsage("cache_id must be 1-100 characters.")
    if occurred_at.tzinfo is None:
        raise InvalidUsage("occurred_at must be timezone-aware.")
    delta = occurred_at - EPOCH
    at_us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _encoder.encode(
        _Message(
            str(tenant.pk),
            request_id,
            at_us,
            provider,
            model,
            worker,
            pool,
            _optional_uuid("api_key_id", api_key_id),
            _optional_uuid("principal_id", principal_id),
            None if cache_id is None else str(cache_id),
            prompt_tokens,
            cached_read_tokens,
            cache_write_5m_tokens,
            cache_write_1h_tokens,
            output_tokens,
            _optional_ms("ttft_ms", ttft_ms),
            _optional_ms("latency_ms", latency_ms),
            str(status),
            bool(stream),
            thinking_tokens,
            audio_prompt_tokens,
            audio_cached_read_tokens,
            audio_output_tokens,
            str(kind),
            ttl_seconds,
        )
    )


def usage_record(**kwargs: Any) -> None:
    """Append one request's usage to the ledger queue (one Redis RPUSH, no SQL).

    Keyword-only, the arguments of :func:`usage_message`. Raises InvalidUsage for counts
    that cannot be true. The row reaches PostgreSQL at the next flush; replaying the same
    ``(tenant, request_id)`` is harmless.
    """
    ops.redis_client().rpush(queue_key(), usage_message(**kwargs))


def usage_record_many(messages: list[bytes]) -> None:
    """Append already-encoded messages in one round trip (batch producers, benchmarks)."""
    if messages:
        ops.redis_client().rpush(queue_key(), *messages)


@dataclass
class FlushResult:
    """What one flush did."""

    batches: int = 0
    claimed: int = 0
    inserted: int = 0
    duplicates: int = 0
    unpriced: int = 0
    malformed: int = 0
    recovered_batches: int = 0
    skipped: bool = False
    batch_keys: list[str] = field(default_factory=list)


def micros_sql(nanos: str) -> str:
    """SQL for ``nanos`` (a non-negative bigint expression) in µ$, rounded half-even,
    exactly as ``billing.pricing.nanos_to_micros`` does it (``mod()``, not ``%``, so the
    text is safe in statements that also take parameters)."""
    return (
        f"(({nanos}) / 1000 + CASE WHEN mod({nanos}, 1000) > 500 OR "
        f"(mod({nanos}, 1000) = 500 AND mod(({nanos}) / 1000, 2) = 1) THEN 1 ELSE 0 END)"
    )


# Rows are COPYed (binary) into a per-session staging table, then moved into the ledger
# in one statement. Ids travel as text and are cast here (binary COPY would need uuid
# objects); ON COMMIT DELETE ROWS empties the stage with the transaction.
_STAGE_COLUMNS = (
    ("tenant_id", "text"),
    ("request_id", "text"),
    ("occurred_at", "timestamptz"),
    ("provider", "text"),
    ("model", "text"),
    ("worker", "text"),
    ("pool", "text"),
    ("api_key_id", "text"),
    ("principal_id", "text"),
    ("cache_id", "text"),
    ("prompt_tokens", "int4"),
    ("cached_read_tokens", "int4"),
    ("cache_write_5m_tokens", "int4"),
    ("cache_write_1h_tokens", "int4"),
    ("output_tokens", "int4"),
    ("thinking_tokens", "int4"),
    ("audio_prompt_tokens", "int4"),
    ("audio_cached_read_tokens", "int4"),
    ("audio_output_tokens", "int4"),
    ("kind", "text"),
    ("ttft_ms", "int4"),
    ("latency_ms", "int4"),
    ("status", "text"),
    ("stream", "bool"),
    ("price_version_id", "int8"),
    ("pool_price_id", "int8"),
    ("cost_nanos", "int8"),
    ("cost_without_cache_nanos", "int8"),
)
_STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS billing_usage_stage_v2 ("
    + ", ".join(f"{name} {kind}" for name, kind in _STAGE_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
_STAGE_COPY = (
    "COPY billing_usage_stage_v2 ("
    + ", ".join(name for name, _ in _STAGE_COLUMNS)
    + ") FROM STDIN (FORMAT BINARY)"
)

_ROLLUP_SUMS = (
    "prompt_tokens",
    "cached_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "thinking_tokens",
    "audio_prompt_tokens",
    "audio_output_tokens",
    "cost_nanos",
    "cost_without_cache_nanos",
)

_INSERT_SQL = (
    """
WITH rows AS (
  SELECT tenant_id::uuid, request_id, occurred_at, provider, model, worker, pool,
         api_key_id::uuid, principal_id::uuid, cache_id, prompt_tokens, cached_read_tokens,
         cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, thinking_tokens,
         audio_prompt_tokens, audio_cached_read_tokens, audio_output_tokens, kind, ttft_ms,
         latency_ms, status, stream, price_version_id, pool_price_id, cost_nanos,
         cost_without_cache_nanos, """
    + micros_sql("cost_nanos")
    + ", "
    + micros_sql("cost_without_cache_nanos")
    + """
  FROM billing_usage_stage_v2
), ins AS (
  INSERT INTO billing_usagerecord (
    tenant_id, request_id, occurred_at, provider, model, worker, pool, api_key_id,
    principal_id, cache_id, prompt_tokens, cached_read_tokens, cache_write_5m_tokens,
    cache_write_1h_tokens, output_tokens, thinking_tokens, audio_prompt_tokens,
    audio_cached_read_tokens, audio_output_tokens, kind, ttft_ms, latency_ms, status, stream,
    price_version_id, pool_price_id, cost_nanos, cost_without_cache_nanos, cost_micros,
    cost_without_cache_micros, recorded_at)
  SELECT rows.*, now() FROM rows
  ON CONFLICT (tenant_id, request_id) DO NOTHING
  RETURNING tenant_id, occurred_at, provider, model, status, prompt_tokens,
            cached_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, output_tokens,
            thinking_tokens, audio_prompt_tokens, audio_output_tokens, cost_nanos,
            cost_without_cache_nanos, (price_version_id IS NULL AND pool_price_id IS NULL)
            AS unpriced
), sums AS (
  SELECT ins.tenant_id, g.granularity, date_trunc(g.granularity, ins.occurred_at, 'UTC') AS b,
         ins.provider, ins.model, count(*) AS requests,
         count(*) FILTER (WHERE ins.status <> 'ok') AS error_requests,
         count(*) FILTER (WHERE ins.unpriced) AS unpriced_requests, """
    + ", ".join(f"sum(ins.{f}) AS {f}" for f in _ROLLUP_SUMS)
    + """
  FROM ins CROSS JOIN (VALUES ('minute'), ('day')) AS g(granularity)
  GROUP BY 1, 2, 3, 4, 5
), roll AS (
  INSERT INTO billing_usagerollup (
    tenant_id, granularity, bucket, provider, model, requests, error_requests,
    unpriced_requests, """
    + ", ".join(_ROLLUP_SUMS)
    + """, cost_micros, cost_without_cache_micros)
  SELECT sums.*, """
    + micros_sql("sums.cost_nanos")
    + ", "
    + micros_sql("sums.cost_without_cache_nanos")
    + """
  FROM sums ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (tenant_id, granularity, bucket, provider, model) DO UPDATE SET
    requests = billing_usagerollup.requests + EXCLUDED.requests,
    error_requests = billing_usagerollup.error_requests + EXCLUDED.error_requests,
    unpriced_requests = billing_usagerollup.unpriced_requests + EXCLUDED.unpriced_requests, """
    + ", ".join(f"{f} = billing_usagerollup.{f} + EXCLUDED.{f}" for f in _ROLLUP_SUMS)
    + ", cost_micros = "
    + micros_sql("billing_usagerollup.cost_nanos + EXCLUDED.cost_nanos")
    + ", cost_without_cache_micros = "
    + micros_sql("billing_usagerollup.cost_without_cache_nanos + EXCLUDED.cost_without_cache_nanos")
    + """
  RETURNING 1
)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM roll)
"""
)


def price_row(
    index: PriceIndex, m: _Message, at: datetime
) -> tuple[int | None, int | None, Cost | None]:
    """(model price id, pool price id, cost) of one message, or Nones when unpriced."""
    counts = m.counts()
    if m.provider == Provider.VLLM:
        pool_price = index.pool_price(m.pool, at)
        if pool_price is None:
            return None, None, None
        return None, pool_price.pk, gpu_cost(counts, index.pool_rates(pool_price))
    price = index.model_price(m.provider, m.model, at)
    if price is None:
        return None, None, None
    rates = index.rates(price)
    if m.kind == UsageKind.CACHE_CREATE:
        cost = cache_creation_cost(
            tokens=m.prompt_tokens, rates=rates, ttl_seconds=m.ttl_seconds or 3600
        )
        return price.pk, None, cost
    return price.pk, None, token_cost(counts, rates, at)


def _write_batch(messages: list[_Message], result: FlushResult) -> None:
    index = PriceIndex(
        models={(m.provider, m.model) for m in messages if m.provider != Provider.VLLM},
        pools={m.pool for m in messages if m.provider == Provider.VLLM},
    )
    rows: list[tuple[Any, ...]] = []
    for m in messages:
        at = EPOCH + timedelta(microseconds=m.at_us)
        price_id, pool_price_id, cost = price_row(index, m, at)
        if cost is None:
            result.unpriced += 1
        values = (
            m.tenant_id,
            m.request_id,
            at,
            m.provider,
            m.model,
            m.worker,
            m.pool,
            m.api_key_id,
            m.principal_id,
            m.cache_id,
            m.prompt_tokens,
            m.cached_read_tokens,
            m.cache_write_5m_tokens,
            m.cache_write_1h_tokens,
            m.output_tokens,
            m.thinking_tokens,
            m.audio_prompt_tokens,
            m.audio_cached_read_tokens,
            m.audio_output_tokens,
            m.kind,
            m.ttft_ms,
            m.latency_ms,
            m.status,
            m.stream,
            price_id,
            pool_price_id,
            cost.nanos if cost else 0,
            cost.without_cache_nanos if cost else 0,
        )
        rows.append(values)
    with transaction.atomic():
        connection.ensure_connection()
        # The raw psycopg cursor: binary COPY (rows encoded in C) and no SQL logging.
        with connection.connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK])
            cursor.execute(_STAGE_DDL)
            with cursor.copy(_STAGE_COPY) as copy:
                copy.set_types([kind for _, kind in _STAGE_COLUMNS])
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_INSERT_SQL)
            inserted, _ = cursor.fetchone()
        if inserted:
            _publish_booked({str(m.tenant_id) for m in messages})
    result.inserted += inserted
    result.duplicates += len(messages) - inserted


def _publish_booked(tenant_ids: set[str]) -> None:
    """After commit, tell each tenant's usage topic that the ledger moved, so live pages
    re-read their ledger-backed figures (month spend, savings) then, not on a reload."""
    from controlplane.live import platform_group, publish_on_commit, tenant_group

    for tenant_id in sorted(tenant_ids):
        publish_on_commit(tenant_group(tenant_id, "usage"), "usage.booked", {"at": time.time()})
    publish_on_commit(
        platform_group("usage"), "usage.booked", {"at": time.time(), "tenants": len(tenant_ids)}
    )


def usage_write_direct(messages: list[bytes]) -> FlushResult:
    """Write encoded usage straight to the ledger and rollups (the queue is unreachable).

    The same idempotent path as the flush: a message later replayed from the queue
    inserts nothing. One transaction; slower than the queue, so it is the fallback only.
    """
    result = FlushResult()
    decoded = [_decoder.decode(item) for item in messages]
    if decoded:
        _write_batch(decoded, result)
    return result


def _flush_batch(batch_key: str, result: FlushResult) -> None:
    client = ops.redis_client()
    # The client does not decode responses (the default): every reply item is bytes.
    raw = cast("list[bytes]", client.lrange(batch_key, 0, -1))
    messages = []
    for item in raw:
        try:
            messages.append(_decoder.decode(item))
        except msgspec.DecodeError:
            # Written by usage_message only; a message that cannot be read would block the
            # batch forever, so it is logged and dropped.
            result.malformed += 1
            logger.error("billing: dropped a malformed usage message", extra={"raw": item[:200]})
    if messages:
        _write_batch(messages, result)
    # Only after the commit: a crash before this line replays the batch (idempotent).
    _, claims = _keys()
    client.delete(batch_key)
    client.zrem(claims, batch_key)
    result.batches += 1
    result.claimed += len(raw)
    result.batch_keys.append(batch_key)


def usage_batch_claim(*, batch_size: int, now: float | None = None) -> str | None:
    """Move up to ``batch_size`` queued messages into a new claimed batch; its key, or None
    when the queue is empty.

    The claim is stamped ``now`` (default: the current time); a batch still claimed a lease
    later belongs to a flush that died, and the next flush recovers it.
    """
    queue, claims = _keys()
    batch_key = f"{queue}:batch:{uuid.uuid4().hex}"
    stamp = time.time() if now is None else now
    claim = ops.redis_client().register_script(_CLAIM_SCRIPT)
    return batch_key if claim(keys=[queue, batch_key, claims], args=[batch_size, stamp]) else None


def usage_flush(*, batch_size: int | None = None, max_batches: int | None = None) -> FlushResult:
    """Drain the usage queue into the ledger and rollups, at most ``max_batches`` batches.

    Idempotent: replaying any message inserts nothing and increments no rollup. One
    flush runs at a time (a Redis lock; an overlapping run returns ``skipped``). Batches
    claimed by a worker that died (older than the lease) are flushed first.
    """
    batch_size = batch_size or settings.CACHEPLANE_BILLING_FLUSH_BATCH
    max_batches = max_batches or settings.CACHEPLANE_BILLING_FLUSH_MAX_BATCHES
    lease = settings.CACHEPLANE_BILLING_FLUSH_LEASE_SECONDS
    client = ops.redis_client()
    queue, claims = _keys()
    result = FlushResult()
    # redis-py's lock: a token per holder, released only by its holder, gone after lease.
    lock = client.lock(f"{queue}:lock", timeout=lease, blocking=False)
    if not lock.acquire():
        result.skipped = True
        return result
    try:
        stale_before = time.time() - lease
        stale = client.zrangebyscore(claims, "-inf", stale_before, start=0, num=max_batches)
        for key in cast("list[bytes]", stale):
            result.recovered_batches += 1
            try:
                _flush_batch(key.decode(), result)
            except Exception:
                # One batch that keeps failing must not block the queue behind it: it is
                # retried once per lease (and alerted on through the logs).
                logger.exception("billing: a recovered usage batch failed", extra={"batch": key})
                client.zadd(claims, {key: time.time()})
        while result.batches < max_batches:
            batch_key = usage_batch_claim(batch_size=batch_size)
            if batch_key is None:
                break
            _flush_batch(batch_key, result)
    finally:
        with contextlib.suppress(LockNotOwnedError):  # the lease ran out; another run owns it
            lock.release()
    return result


def cache_creation_record(
    *,
    tenant: Tenant,
    cache_id: str,
    operation_id: str,
    provider: str,
    model: str,
    tokens: int,
    ttl_seconds: int,
    occurred_at: datetime,
    principal_id: str | None = None,
) -> None:
    """Book the write of an explicit cache's tokens (Vertex bills creation as input).

    One ledger row per creating operation (``request_id`` derives from it, so a retried
    or replayed creation books once), ``kind=cache_create``, priced at the write rate of
    the TTL's tier and saving nothing. vLLM pins cost their prefill through the warm-up
    request, which the gateway meters, so only per-token providers are booked here.
    """
    if provider == Provider.VLLM or not tokens:
        return
    message = usage_message(
        tenant=tenant,
        request_id=f"cache-create:{operation_id}",
        provider=provider,
        model=model,
        occurred_at=occurred_at,
        prompt_tokens=tokens,
        cache_write_1h_tokens=tokens if ttl_seconds > 300 else 0,
        cache_write_5m_tokens=tokens if ttl_seconds <= 300 else 0,
        cache_id=str(cache_id),
        principal_id=principal_id,
        kind=UsageKind.CACHE_CREATE,
        ttl_seconds=ttl_seconds,
    )
    try:
        usage_record_many([message])
    except Exception:
        # Runs after the creation committed: the queue being down must not lose the row
        # (the same idempotent path as the flush; a later replay inserts nothing).
        logger.warning("usage queue unreachable; booking the cache creation directly")
        usage_write_direct([message])
