"""Domain errors of billing, each with a stable code (documented in the README)."""

from __future__ import annotations

from controlplane.errors import Conflict, DomainError, NotFound, ValidationFailed


class InvalidPrice(ValidationFailed):
    """A rate is negative, not finite, or a required rate is missing."""

    code = "invalid_price"


class PriceOverlap(Conflict):
    """A new price version's range overlaps a live version of the same key."""

    code = "price_overlap"


class PriceNotFound(NotFound):
    """No live price version covers (provider, model) or the pool at that time."""

    code = "price_not_found"


class PriceAlreadySuperseded(Conflict):
    code = "price_superseded"


class InvalidUsage(ValidationFailed):
    """Usage counts that cannot be true (negative, cache tokens above the prompt)."""

    code = "invalid_usage"


class UsageRecordNotFound(NotFound):
    """No ledger row of the tenant has that ledger key."""

    code = "usage_record_not_found"


class UsageNotEstimated(Conflict):
    """The row holds counts already (never estimated, or corrected before) and the
    correction names other ones; a replay of the same correction is not an error."""

    code = "usage_not_estimated"


class InvalidPeriod(ValidationFailed):
    code = "invalid_period"


class InvalidThreshold(ValidationFailed):
    code = "invalid_threshold"


class InvalidBudget(ValidationFailed):
    """A limit that is not a positive amount, an unknown principal, a bad webhook URL."""

    code = "invalid_budget"


class InvalidRange(ValidationFailed):
    code = "invalid_range"


class BudgetExceeded(DomainError):
    """The request would take a hard budget over its limit; nothing was done."""

    code = "budget_exceeded"
    http_status = 402


class BudgetNearLimit(BudgetExceeded):
    """A new cache (pin) near a hard budget's limit: the autopilot refuses new pins at
    ``billing.ttl_policy.NEAR_BUDGET`` of a limit; nothing was created."""

    code = "budget_near_limit"


class TtlNotOffered(ValidationFailed):
    """The provider sells no cache with that TTL (Anthropic: 5 minutes or 1 hour only)."""

    code = "ttl_not_offered"
