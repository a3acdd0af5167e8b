"""Writes of billing; see the topic modules.

What other apps call (the gateway, the caches app):

- ``usage_record(tenant=, request_id=, provider=, model=, occurred_at=, prompt_tokens=,
  cached_read_tokens=, cache_write_5m_tokens=, cache_write_1h_tokens=, output_tokens=,
  ttft_ms=, latency_ms=, status=, api_key_id=, principal_id=, cache_id=, worker=, pool=,
  stream=, thinking_tokens=, audio_prompt_tokens=, audio_cached_read_tokens=,
  audio_output_tokens=)``: one Redis RPUSH per request (partial streams too, with the
  counts of what was streamed);
- ``budget_reserve(tenant=, principal=, estimate_micros=, request_id=)`` before the work
  (None when no budget applies), then ``budget_settle(reservation=, actual_micros=)`` or
  ``budget_release(reservation=)`` on the reservation it returned;
- ``budget_reserve_cache_storage(...)`` before creating a cache;
- ``cache_creation_record(...)`` when an explicit cache has been written;
- ``storage_accrue(tenant=, cache_id=, provider=, model=, tokens=, start=, end=)`` from
  the caches app's beat task.
"""

from billing.services.budget_crud import (
    budget_archive,
    budget_create,
    budget_rotate_secret,
    budget_update,
)
from billing.services.budgets import (
    budget_release,
    budget_reservations_expire,
    budget_reserve,
    budget_reserve_cache_storage,
    budget_settle,
)
from billing.services.prices import (
    model_price_correct,
    model_price_create,
    pool_price_correct,
    pool_price_create,
)
from billing.services.storage import storage_accrue
from billing.services.usage import cache_creation_record, usage_flush, usage_record

__all__ = [
    "budget_archive",
    "cache_creation_record",
    "budget_create",
    "budget_release",
    "budget_reservations_expire",
    "budget_reserve",
    "budget_reserve_cache_storage",
    "budget_rotate_secret",
    "budget_settle",
    "budget_update",
    "model_price_correct",
    "model_price_create",
    "pool_price_correct",
    "pool_price_create",
    "storage_accrue",
    "usage_flush",
    "usage_record",
]
