"""Booking a cost from another app: one function, the ledger's own path.

``book_cost`` is what the caches and workers apps call for a cost the gateway does not
see (a vLLM warm-up or pin-probe prefill sent by Celery, a creation, a batch row). It
writes one ledger row under a key the caller mints from its own operation (a replay of
the same key books nothing), and the ledger flush books that row's exact cost onto every
budget period it falls in (``billing.services.ledger_booking``): there is no other way
to move a budget. ``usage_estimate_correct`` replaces a row booked as an estimate (a
timed-out gateway request) with what the provider reported, booking the difference.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis

from billing.models import UsageKind
from billing.services.usage.flush import usage_write_direct
from billing.services.usage.queue import usage_message, usage_record_many
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def book_cost(
    *,
    tenant: Tenant,
    ledger_key: str,
    provider: str,
    model: str,
    occurred_at: datetime,
    kind: str = UsageKind.REQUEST,
    prompt_tokens: int = 0,
    cached_read_tokens: int = 0,
    output_tokens: int = 0,
    cache_id: str | None = None,
    worker: str = "",
    pool: str = "",
    principal_id: str | None = None,
    client_request_id: str = "",
) -> None:
    """Book one cost in the ledger, and through it on the tenant's budgets.

    ``ledger_key`` (1-128 characters) is the idempotency key: derive it from the
    operation that caused the cost (``warmup:<operation id>:<n>``), never from a client's
    id. ``occurred_at`` is when the work ran (prices and budget periods apply there).
    ``kind``: ``request``, ``cache_create`` or ``cache_warmup`` (warm-ups and probes). A
    vLLM cost is priced at ``pool``'s GPU price (prefill and decode). Raises
    ``InvalidUsage`` for counts that cannot be true; the queue being down falls back to a
    direct write (the same idempotent path).
    """
    message = usage_message(
        tenant=tenant,
        request_id=ledger_key,
        provider=provider,
        model=model,
        occurred_at=occurred_at,
        prompt_tokens=prompt_tokens,
        cached_read_tokens=cached_read_tokens,
        output_tokens=output_tokens,
        cache_id=cache_id,
        worker=worker,
        pool=pool,
        principal_id=principal_id,
        kind=kind,
        client_request_id=client_request_id,
    )
    try:
        usage_record_many([message])
    except redis.RedisError:
        logger.warning("usage queue unreachable; booking %s directly", ledger_key)
        usage_write_direct([message])
