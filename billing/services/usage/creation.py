"""Cache creation booked in the ledger: one ``kind=cache_create`` row per creating operation."""

from __future__ import annotations

import logging
from datetime import datetime

from billing.models import Provider, UsageKind
from billing.services.usage.flush import usage_write_direct
from billing.services.usage.queue import usage_message, usage_record_many
from tenants.models import Tenant

logger = logging.getLogger(__name__)


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
