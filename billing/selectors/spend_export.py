"""The spend export: every ledger row and storage accrual of a period, as CSV rows.

Amounts are exact µ$ integers with a fixed-point USD column beside them (no float ever
touches money), and the rows stream from server-side cursors so any period fits in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import F

from billing.models import StorageAccrual
from billing.selectors.usage import usage_list
from tenants.models import Tenant

EXPORT_COLUMNS = (
    "kind",
    "occurred_at",
    "request_id",
    "provider",
    "model",
    "pool",
    "worker",
    "cache_id",
    "api_key_id",
    "status",
    "prompt_tokens",
    "cached_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "storage_seconds",
    "price_version",
    "cost_micros",
    "cost_without_cache_micros",
    "cost_usd",
)


def _usd(micros: int) -> str:
    """µ$ as a fixed-point USD string (``-1.000000``), exact at any size."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def spend_export_rows(*, tenant: Tenant, since: datetime, until: datetime) -> Iterator[list[Any]]:
    """Every ledger row and storage accrual in [since, until), in time order, for CSV.

    Streams with server-side cursors (``iterator``) so memory stays flat at any size.
    """
    records = (
        usage_list(tenant=tenant, since=since, until=until)
        .order_by("occurred_at", "id")
        .values_list(
            "occurred_at",
            "request_id",
            "provider",
            "model",
            "pool",
            "worker",
            "cache_id",
            "api_key_id",
            "status",
            "prompt_tokens",
            "cached_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "price_version_id",
            "pool_price_id",
            "cost_micros",
            "cost_without_cache_micros",
        )
    )
    for r in records.iterator(chunk_size=2000):
        price = f"model:{r[14]}" if r[14] else (f"pool:{r[15]}" if r[15] else "")
        yield [
            "request",
            r[0].isoformat(),
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6] or "",
            r[7] or "",
            r[8],
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
            "",
            price,
            r[16],
            r[17],
            _usd(r[16]),
        ]
    accruals = (
        StorageAccrual.objects.filter(tenant=tenant, hour__gte=since, hour__lt=until)
        .annotate(seconds=F("covered_to") - F("covered_from"))
        .order_by("hour", "id")
        .values_list(
            "hour",
            "provider",
            "model",
            "pool",
            "cache_id",
            "seconds",
            "price_version_id",
            "pool_price_id",
            "cost_micros",
        )
    )
    for a in accruals.iterator(chunk_size=2000):
        price = f"model:{a[6]}" if a[6] else (f"pool:{a[7]}" if a[7] else "")
        yield [
            "storage",
            a[0].isoformat(),
            "",
            a[1],
            a[2],
            a[3],
            "",
            a[4],
            "",
            "ok",
            "",
            "",
            "",
            "",
            "",
            f"{a[5].total_seconds():.6f}",
            price,
            a[8],
            a[8],
            _usd(a[8]),
        ]
