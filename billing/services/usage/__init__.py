"""The usage ledger: recorded on the request path into Redis (``queue``), flushed to
PostgreSQL in batches (``flush``; the algorithm is described there). Every name callers
use is importable from here, as before the split."""

from billing.services.ledger_booking import ROLLUP_LOCK
from billing.services.usage.booking import book_cost
from billing.services.usage.creation import cache_creation_record
from billing.services.usage.estimates import usage_estimate_correct
from billing.services.usage.flush import (
    FlushResult,
    micros_sql,
    usage_batch_claim,
    usage_flush,
    usage_write_direct,
)
from billing.services.usage.pricing_rows import price_row
from billing.services.usage.queue import (
    AUTOPILOT_MAX_CHARS,
    EPOCH,
    ROUTE_MAX_CHARS,
    queue_key,
    usage_message,
    usage_queue_append,
    usage_record,
    usage_record_many,
)

__all__ = [
    "AUTOPILOT_MAX_CHARS",
    "ROUTE_MAX_CHARS",
    "EPOCH",
    "ROLLUP_LOCK",
    "FlushResult",
    "book_cost",
    "cache_creation_record",
    "micros_sql",
    "price_row",
    "queue_key",
    "usage_batch_claim",
    "usage_flush",
    "usage_message",
    "usage_queue_append",
    "usage_record",
    "usage_record_many",
    "usage_estimate_correct",
    "usage_write_direct",
]
