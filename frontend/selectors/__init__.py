"""Read models for the console pages: each function is a bounded number of queries.

Split by page family: ``tenant`` (a tenant's overview, cache page and rankings),
``platform`` (the cross-tenant overview, rankings, workers and the break-even calculator's
model list), ``series`` (chart data from the usage rollups) and ``common`` (month window,
dollars). The console views use them as ``selectors.<name>``, re-exported here.
"""

from frontend.selectors.common import month_bounds, usd
from frontend.selectors.platform import (
    breakeven_models,
    platform_summary,
    platform_top,
    worker_rows,
    workers_summary,
)
from frontend.selectors.series import (
    RANGES,
    SeriesRangeInvalid,
    custom_range,
    hit_series,
    usage_series,
)
from frontend.selectors.tenant import (
    cache_detail,
    tenant_spend_section,
    tenant_summary,
    tenant_top_caches,
)

__all__ = [
    "RANGES",
    "SeriesRangeInvalid",
    "breakeven_models",
    "cache_detail",
    "custom_range",
    "hit_series",
    "month_bounds",
    "platform_summary",
    "platform_top",
    "tenant_spend_section",
    "tenant_summary",
    "tenant_top_caches",
    "usage_series",
    "usd",
    "worker_rows",
    "workers_summary",
]
