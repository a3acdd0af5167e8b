"""Billing: the price book, the usage ledger and its rollups, storage accruals, budgets.

Money is booked as integer nano-USD (``*_nanos``, 1 USD = 10^9) in the ledger, the
rollups and the storage accruals; each such row also carries its µ$ figure
(``*_micros``, the nanos rounded once, half-even) for readers that show micro-USD.
Budgets count whole µ$. Per-token rates are exact decimals in USD per 1M tokens; see
``billing.pricing`` for the arithmetic and the rounding rule.

A package by topic (``prices``, ``usage``, ``budgets``, ``ttl``); every model and the
helpers migrations name (``billing.models._TsTzRange``, ``billing.models._new_webhook_secret``)
are importable from here, as before the split.
"""

from billing.models.budgets import (
    Budget,
    BudgetAlert,
    BudgetPeriod,
    BudgetPeriodKind,
    BudgetReservation,
    ReservationState,
    WebhookState,
    _new_webhook_secret,
)
from billing.models.prices import (
    RATE,
    ModelPrice,
    PoolPrice,
    PriceVersionBase,
    Provider,
    _effective_range,
    _TsTzRange,
)
from billing.models.ttl import TtlProfile
from billing.models.usage import (
    Granularity,
    StorageAccrual,
    UsageKind,
    UsageRecord,
    UsageRollup,
    UsageStatus,
)

__all__ = [
    "RATE",
    "Budget",
    "BudgetAlert",
    "BudgetPeriod",
    "BudgetPeriodKind",
    "BudgetReservation",
    "Granularity",
    "ModelPrice",
    "PoolPrice",
    "PriceVersionBase",
    "Provider",
    "ReservationState",
    "StorageAccrual",
    "TtlProfile",
    "UsageKind",
    "UsageRecord",
    "UsageRollup",
    "UsageStatus",
    "WebhookState",
    "_TsTzRange",
    "_effective_range",
    "_new_webhook_secret",
]
