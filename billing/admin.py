"""Operator pages for billing: read-only.

Price edits go through the API (``prices.manage``), which validates overlaps and writes
the audit event in the same transaction; generic admin forms would do neither, so the
price book is read-only here. The ledger and rollups are written by the flush only.
"""

from django.contrib import admin

from billing.models import (
    Budget,
    BudgetAlert,
    BudgetPeriod,
    BudgetReservation,
    ModelPrice,
    PoolPrice,
    StorageAccrual,
    UsageRecord,
    UsageRollup,
)
from controlplane.readonly_admin import ReadOnlyAdmin


@admin.register(ModelPrice)
class ModelPriceAdmin(ReadOnlyAdmin):
    list_display = (
        "provider",
        "model",
        "version",
        "effective_from",
        "effective_to",
        "input_per_mtok",
        "cached_input_per_mtok",
        "output_per_mtok",
        "superseded_at",
    )
    list_filter = ("provider",)
    search_fields = ("model", "source")


@admin.register(PoolPrice)
class PoolPriceAdmin(ReadOnlyAdmin):
    list_display = ("pool", "version", "effective_from", "effective_to", "gpu_hour_usd")
    search_fields = ("pool",)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "occurred_at",
        "tenant",
        "request_id",
        "provider",
        "model",
        "status",
        "cost_micros",
    )
    list_filter = ("provider", "status")
    search_fields = ("request_id", "cache_id")
    list_select_related = ("tenant",)
    show_full_result_count = False  # COUNT(*) over the ledger is too slow to show


@admin.register(UsageRollup)
class UsageRollupAdmin(ReadOnlyAdmin):
    list_display = (
        "bucket",
        "granularity",
        "tenant",
        "provider",
        "model",
        "requests",
        "cost_micros",
    )
    list_filter = ("granularity", "provider")
    list_select_related = ("tenant",)


@admin.register(StorageAccrual)
class StorageAccrualAdmin(ReadOnlyAdmin):
    list_display = ("hour", "tenant", "cache_id", "provider", "model", "tokens", "cost_micros")
    list_select_related = ("tenant",)


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "period", "limit_micros", "hard_limit", "archived_at")
    list_select_related = ("tenant",)
    exclude = ("webhook_secret",)


@admin.register(BudgetPeriod)
class BudgetPeriodAdmin(ReadOnlyAdmin):
    list_display = ("budget", "period_start", "spent_micros", "reserved_micros", "limit_micros")


@admin.register(BudgetReservation)
class BudgetReservationAdmin(ReadOnlyAdmin):
    list_display = ("request_id", "tenant", "amount_micros", "state", "expires_at")
    list_filter = ("state",)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ("budget", "threshold", "spent_micros", "created_at", "webhook_state")
    list_filter = ("webhook_state",)
