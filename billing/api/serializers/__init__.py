"""Input and output shapes of the billing API (inputs and outputs are separate classes).

One module per resource (``prices``, ``usage``, ``budgets``, ``breakeven``; shared fields in
``fields``); the views use them as ``serializers.<Name>``, re-exported here.

Money is integer micro-USD (``*_micros``, each the exact nano-USD total rounded once;
ledger rows also show ``cost_nanos``); rates are decimal strings in USD per 1M tokens.
Anything booked without a price says so: ``unpriced`` on a ledger row,
``unpriced_requests`` on spend rows and savings (then the figures are incomplete).
Rate inputs deliberately have no range here: the service rejects negative rates with
``invalid_price`` (non-numeric input is ``invalid_input``).
"""

from billing.api.serializers.breakeven import (
    BlendedOut,
    BreakEvenInput,
    BreakEvenOut,
)
from billing.api.serializers.budgets import (
    BudgetAlertOut,
    BudgetCreateInput,
    BudgetOut,
    BudgetPeriodOut,
    BudgetSecretOut,
    BudgetUpdateInput,
)
from billing.api.serializers.fields import ProviderField, rate_field
from billing.api.serializers.prices import (
    DiscountWindowIn,
    ModelPriceCorrectInput,
    ModelPriceCreateInput,
    ModelPriceOut,
    ModelRatesInput,
    PoolPriceCreateInput,
    PoolPriceOut,
    PoolRatesInput,
)
from billing.api.serializers.usage import (
    RangeQuery,
    SavingsOut,
    SpendOut,
    SpendQuery,
    SpendRowOut,
    UsageCorrectionInput,
    UsageQuery,
    UsageRecordOut,
)

__all__ = [
    "BlendedOut",
    "BreakEvenInput",
    "BreakEvenOut",
    "BudgetAlertOut",
    "BudgetCreateInput",
    "BudgetOut",
    "BudgetPeriodOut",
    "BudgetSecretOut",
    "BudgetUpdateInput",
    "DiscountWindowIn",
    "ModelPriceCorrectInput",
    "ModelPriceCreateInput",
    "ModelPriceOut",
    "ModelRatesInput",
    "PoolPriceCreateInput",
    "PoolPriceOut",
    "PoolRatesInput",
    "ProviderField",
    "RangeQuery",
    "SavingsOut",
    "SpendOut",
    "SpendQuery",
    "SpendRowOut",
    "UsageCorrectionInput",
    "UsageQuery",
    "UsageRecordOut",
    "rate_field",
]
