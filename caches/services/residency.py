"""What a vLLM warm-up or probe reports beyond the placement: pool, residency, its cost.

A vLLM cache is a prefix kept in workers' paged KV cache by requests Celery sends
(``caches.providers.vllm``): the warm-up at creation, then a probe per pin. Each of those
requests is real work on the worker, so each is booked in the ledger as the cache's
creation cost (``kind=cache_create``, priced at the worker's pool GPU rate); the cache
records the pool that holds it (storage is priced at that pool's rate) and, from each
probe, how many of its tokens were still resident. A probe that finds fewer than the
prefix's full blocks means a worker evicted the pinned prefix between pins (LRU pressure):
the cache records when (``evicted_seen_at``), its timeline says so and the console alerts.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from caches.models import CacheObject, CacheOperation, OperationKind, Provider
from caches.providers.base import RemoteState


def vllm_result_record(
    *, op: CacheOperation, cache: CacheObject, remote: RemoteState, now: datetime
) -> tuple[list[str], str]:
    """Set the pool and residency from ``remote`` on ``cache`` (locked by the caller) and
    book its prefills after commit; (fields changed, text for the timeline reason)."""
    if cache.provider != Provider.VLLM:
        return [], ""
    prefills_book(op=op, cache=cache, remote=remote, now=now)
    fields: list[str] = []
    if remote.pool:
        cache.pool = remote.pool
        fields.append("pool")
    note = ""
    if op.kind == OperationKind.REFRESH and remote.cached_tokens is not None:
        cache.resident_tokens, cache.resident_checked_at = remote.cached_tokens, now
        fields += ["resident_tokens", "resident_checked_at"]
        if remote.evicted:
            cache.evicted_seen_at = now
            fields.append("evicted_seen_at")
            full = max(p.resident_full for p in remote.prefills)
            note = (
                f"the worker had evicted the pinned prefix ({remote.cached_tokens} of "
                f"{full} tokens resident); the probe re-warmed it"
            )
    return fields, note


def prefills_book(
    *, op: CacheOperation, cache: CacheObject, remote: RemoteState, now: datetime
) -> None:
    """Book each warm-up or probe request as the cache's creation cost (after commit).

    One ledger row per request: the key carries the operation, its attempt and the
    worker's place, so a replayed booking inserts nothing while a retried attempt (which
    warms again) is booked again. The row counts what the worker computed (prompt tokens
    less its prefix-cache hits) and generated: a probe that hit is cheap, and no probe
    shows a saving (without the cache it would not have been sent).
    """
    from billing.models import UsageKind
    from billing.services.usage import usage_message, usage_record_many, usage_write_direct

    kind = "warm" if op.kind == OperationKind.CREATE else "probe"
    messages = [
        usage_message(
            tenant=cache.tenant,
            request_id=f"cache-{kind}:{op.pk}:{op.attempts}:{n}",
            provider=Provider.VLLM,
            model=cache.model,
            occurred_at=now,
            prompt_tokens=p.prompt_tokens - (p.cached_tokens or 0),
            output_tokens=p.output_tokens,
            cache_id=str(cache.pk),
            worker=p.worker,
            pool=p.pool,
            principal_id=str(op.requested_by_id) if op.requested_by_id else None,
            kind=UsageKind.CACHE_CREATE,
            ttl_seconds=int(cache.ttl_seconds),
        )
        for n, p in enumerate(remote.prefills)
        if p.prompt_tokens - (p.cached_tokens or 0) or p.output_tokens
    ]
    if not messages:
        return

    def book() -> None:
        try:
            usage_record_many(messages)
        except Exception:
            # After commit: the queue being down must not lose the rows (the flush's own
            # idempotent path; a later replay inserts nothing).
            usage_write_direct(messages)

    transaction.on_commit(book)
