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
from datetime import timedelta
from typing import Any, cast

import msgspec
from django.conf import settings
from django.db import connection, transaction
from redis.exceptions import LockNotOwnedError

from billing.models import Provider
from billing.selectors.prices import PriceIndex
from billing.services.ledger_booking import ROLLUP_LOCK, Booking, ledger_book
from billing.services.usage.pricing_rows import price_row
from billing.services.usage.queue import (
    EPOCH,
    _decoder,
    _Message,
)
from controlplane import ops
from controlplane.redis import keys
from controlplane.redis.queues import list_claim

logger = logging.getLogger(__name__)


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
    """SQL for ``nanos`` (bigint or numeric, any sign) in µ$, rounded half-even exactly as
    ``billing.pricing.nanos_to_micros`` (``mod()``, not ``%``: safe beside parameters).
    Cast to bigint first: ``sum(bigint)`` is ``numeric``, whose ``/`` is exact, so a new
    rollup of 1,600 n$ stored 1.6 + 1 → 3 µ$, not 2 (issue 23: µ$ column +1 on 5 shapes).
    """
    n = f"(({nanos})::bigint)"
    a = f"abs{n}"
    return (
        f"(sign{n} * ({a} / 1000 + CASE WHEN mod({a}, 1000) > 500 OR "
        f"(mod({a}, 1000) = 500 AND mod({a} / 1000, 2) = 1) THEN 1 ELSE 0 END))"
    )


# Rows are COPYed (binary) into a per-session staging table, then moved into the ledger
# in one statement. Ids travel as text and are cast here (binary COPY would need uuid
# objects); ON COMMIT DELETE ROWS empties the stage with the transaction. The name is
# versioned: a session's stage of an older column list must not be reused.
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
    ("client_request_id", "text"),
    ("estimated", "bool"),
    ("autopilot", "text"),
    ("route", "text"),
)
_STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS billing_usage_stage_v5 ("
    + ", ".join(f"{name} {kind}" for name, kind in _STAGE_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
_STAGE_COPY = (
    "COPY billing_usage_stage_v5 ("
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
    + """, client_request_id, estimated, autopilot, route
  FROM billing_usage_stage_v5
), ins AS (
  INSERT INTO billing_usagerecord (
    tenant_id, request_id, occurred_at, provider, model, worker, pool, api_key_id,
    principal_id, cache_id, prompt_tokens, cached_read_tokens, cache_write_5m_tokens,
    cache_write_1h_tokens, output_tokens, thinking_tokens, audio_prompt_tokens,
    audio_cached_read_tokens, audio_output_tokens, kind, ttft_ms, latency_ms, status, stream,
    price_version_id, pool_price_id, cost_nanos, cost_without_cache_nanos, cost_micros,
    cost_without_cache_micros, client_request_id, estimated, autopilot, route, recorded_at)
  SELECT rows.*, now() FROM rows
  ON CONFLICT (tenant_id, request_id) DO NOTHING
  RETURNING tenant_id, request_id, principal_id, occurred_at, provider, model, status,
            prompt_tokens,
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
SELECT ins.tenant_id, ins.request_id, ins.principal_id, ins.occurred_at, ins.cost_nanos
FROM ins
"""
)


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
            m.client_request_id,
            m.estimate_nanos is not None,
            m.autopilot,
            m.route,
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
            booked = cursor.fetchall()
        inserted = len(booked)
        if inserted:
            # The one booking path: the rows just inserted (never a replay) charge the
            # budget periods they fall in, in this transaction (Redis after commit).
            ledger_book(
                entries=[
                    Booking(
                        tenant_id=str(tenant_id),
                        at=at,
                        nanos=int(nanos),
                        principal_id=str(principal_id) if principal_id else None,
                        hold_id=request_id,
                    )
                    for tenant_id, request_id, principal_id, at, nanos in booked
                ]
            )
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
    claims = keys.usage_claims()
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
    batch_key = keys.usage_batch(uuid.uuid4().hex)
    moved = list_claim(
        ops.redis_client(),
        queue=keys.usage_queue(),
        batch=batch_key,
        claims=keys.usage_claims(),
        limit=batch_size,
        claimed_at=time.time() if now is None else now,
    )
    return batch_key if moved else None


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
    claims = keys.usage_claims()
    result = FlushResult()
    # redis-py's lock: a token per holder, released only by its holder, gone after lease.
    lock = client.lock(keys.usage_flush_lock(), timeout=lease, blocking=False)
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
