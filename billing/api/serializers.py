"""Input and output shapes of the billing API (inputs and outputs are separate classes).

Money is integer micro-USD (``*_micros``, each the exact nano-USD total rounded once;
ledger rows also show ``cost_nanos``); rates are decimal strings in USD per 1M tokens.
Anything booked without a price says so: ``unpriced`` on a ledger row,
``unpriced_requests`` on spend rows and savings (then the figures are incomplete).
Rate inputs deliberately have no range here: the service rejects negative rates with
``invalid_price`` (non-numeric input is ``invalid_input``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import (
    Budget,
    BudgetAlert,
    BudgetPeriod,
    ModelPrice,
    PoolPrice,
    Provider,
    UsageRecord,
)
from controlplane.display_text import display_text_validator


# A pattern, not an enum: drf-spectacular names enums after the field, and the caches
# app's narrower "provider" enum (vertex, vllm) would collide with this one.
@extend_schema_field(
    {
        "type": "string",
        "pattern": "^(" + "|".join(Provider.values) + ")$",
        "description": "One of: " + ", ".join(Provider.values) + " (vllm: self-hosted pools).",
    }
)
class ProviderField(serializers.ChoiceField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=Provider.choices, **kwargs)


def _rate(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=16, decimal_places=6, **kwargs)


_VERSION_FIELDS = [
    "id",
    "version",
    "effective_from",
    "effective_to",
    "superseded_at",
    "superseded_by",
    "source",
    "note",
    "created_at",
]


class ModelPriceOut(serializers.ModelSerializer[ModelPrice]):
    provider = ProviderField(read_only=True)

    class Meta:
        model = ModelPrice
        fields = [
            "provider",
            "model",
            "input_per_mtok",
            "cached_input_per_mtok",
            "cache_write_5m_per_mtok",
            "cache_write_1h_per_mtok",
            "storage_per_mtok_hour",
            "output_per_mtok",
            "long_threshold_tokens",
            "long_input_per_mtok",
            "long_cached_input_per_mtok",
            "long_cache_write_5m_per_mtok",
            "long_cache_write_1h_per_mtok",
            "long_output_per_mtok",
            "long_threshold_basis",
            "long_storage_per_mtok_hour",
            "thinking_per_mtok",
            "audio_input_per_mtok",
            "audio_cached_input_per_mtok",
            "audio_output_per_mtok",
            "time_discounts",
            *_VERSION_FIELDS,
        ]
        read_only_fields = fields


class DiscountWindowIn(serializers.Serializer[None]):
    start = serializers.CharField(max_length=5, help_text="HH:MM, UTC (inclusive).")
    end = serializers.CharField(max_length=5, help_text="HH:MM, UTC (exclusive; may wrap).")
    percent = serializers.IntegerField(min_value=1, max_value=100)


_NO_PREMIUM = "Default: the input rate (no write premium)."


class ModelRatesInput(serializers.Serializer[None]):
    input_per_mtok = _rate()
    cached_input_per_mtok = _rate()
    output_per_mtok = _rate()
    cache_write_5m_per_mtok = _rate(required=False, allow_null=True, help_text=_NO_PREMIUM)
    cache_write_1h_per_mtok = _rate(required=False, allow_null=True, help_text=_NO_PREMIUM)
    storage_per_mtok_hour = _rate(required=False, allow_null=True, help_text="Default 0.")
    long_threshold_tokens = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**31 - 1,
        help_text="Prompts above this many tokens use the long_* rates.",
    )
    long_input_per_mtok = _rate(required=False, allow_null=True)
    long_cached_input_per_mtok = _rate(required=False, allow_null=True)
    long_cache_write_5m_per_mtok = _rate(required=False, allow_null=True)
    long_cache_write_1h_per_mtok = _rate(required=False, allow_null=True)
    long_output_per_mtok = _rate(required=False, allow_null=True)
    long_threshold_basis = serializers.ChoiceField(
        choices=["prompt", "uncached_prompt"],
        required=False,
        help_text="Which tokens count towards the threshold (default: every prompt token).",
    )
    long_storage_per_mtok_hour = _rate(required=False, allow_null=True)
    thinking_per_mtok = _rate(required=False, allow_null=True, help_text="Default: output.")
    audio_input_per_mtok = _rate(required=False, allow_null=True, help_text="Default: input.")
    audio_cached_input_per_mtok = _rate(required=False, allow_null=True)
    audio_output_per_mtok = _rate(required=False, allow_null=True, help_text="Default: output.")
    time_discounts = DiscountWindowIn(many=True, required=False)
    # A field named "source": the serializer metaclass moves declared fields off the class,
    # so it never shadows Field.source at runtime; the stubs see a class attribute.
    source = serializers.CharField(max_length=2000, help_text="Where the price comes from.")  # type: ignore[assignment]
    note = serializers.CharField(max_length=500, required=False, allow_blank=True)


class ModelPriceCorrectInput(ModelRatesInput):
    """A correction names only what was wrong; every other rate of the version is kept."""

    input_per_mtok = _rate(required=False)
    cached_input_per_mtok = _rate(required=False)
    output_per_mtok = _rate(required=False)


class ModelPriceCreateInput(ModelRatesInput):
    provider = ProviderField()
    model = serializers.CharField(max_length=200)
    effective_from = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Default: now. Never in the past."
    )
    effective_to = serializers.DateTimeField(required=False, allow_null=True)


class PoolPriceOut(serializers.ModelSerializer[PoolPrice]):
    class Meta:
        model = PoolPrice
        fields = [
            "pool",
            "gpu_hour_usd",
            "prefill_tokens_per_gpu_second",
            "decode_tokens_per_gpu_second",
            "kv_blocks_per_gpu",
            "kv_block_tokens",
            *_VERSION_FIELDS,
        ]
        read_only_fields = fields


class PoolRatesInput(serializers.Serializer[None]):
    gpu_hour_usd = _rate()
    prefill_tokens_per_gpu_second = serializers.DecimalField(max_digits=16, decimal_places=3)
    decode_tokens_per_gpu_second = serializers.DecimalField(max_digits=16, decimal_places=3)
    kv_blocks_per_gpu = serializers.IntegerField(max_value=2**31 - 1)
    kv_block_tokens = serializers.IntegerField(required=False, max_value=2**31 - 1)
    # A field named "source": the serializer metaclass moves declared fields off the class,
    # so it never shadows Field.source at runtime; the stubs see a class attribute.
    source = serializers.CharField(max_length=2000)  # type: ignore[assignment]
    note = serializers.CharField(max_length=500, required=False, allow_blank=True)


class PoolPriceCreateInput(PoolRatesInput):
    pool = serializers.CharField(max_length=100)
    effective_from = serializers.DateTimeField(required=False, allow_null=True)
    effective_to = serializers.DateTimeField(required=False, allow_null=True)


class UsageRecordOut(serializers.ModelSerializer[UsageRecord]):
    provider = ProviderField(read_only=True)

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "request_id",
            "occurred_at",
            "provider",
            "model",
            "worker",
            "pool",
            "api_key_id",
            "principal_id",
            "cache_id",
            "prompt_tokens",
            "cached_read_tokens",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "thinking_tokens",
            "audio_prompt_tokens",
            "audio_cached_read_tokens",
            "audio_output_tokens",
            "kind",
            "ttft_ms",
            "latency_ms",
            "status",
            "stream",
            "price_version",
            "pool_price",
            "unpriced",
            "cost_nanos",
            "cost_micros",
            "cost_without_cache_micros",
            "recorded_at",
            "repriced_at",
        ]
        read_only_fields = fields

    unpriced = serializers.SerializerMethodField(
        help_text="True when no price covered the row: its cost is 0 until a reprice."
    )

    def get_unpriced(self, row: UsageRecord) -> bool:
        return row.price_version_id is None and row.pool_price_id is None


class RangeQuery(serializers.Serializer[None]):
    since = serializers.DateTimeField(required=False, help_text="Default: start of this month.")
    until = serializers.DateTimeField(required=False, help_text="Default: now.")


class UsageQuery(RangeQuery):
    model = serializers.CharField(required=False, max_length=200)
    cache_id = serializers.CharField(required=False, max_length=100)


class SpendQuery(RangeQuery):
    group_by = serializers.ChoiceField(choices=["day", "model", "provider", "cache"])


class SpendRowOut(serializers.Serializer[dict[str, Any]]):
    key = serializers.CharField(
        help_text="The day (ISO date), provider:model, provider or cache id."
    )
    requests = serializers.IntegerField()
    unpriced_requests = serializers.IntegerField(
        help_text="Requests booked without a price (cost 0): the figures are incomplete."
    )
    prompt_tokens = serializers.IntegerField()
    cached_read_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    thinking_tokens = serializers.IntegerField()
    request_cost_micros = serializers.IntegerField()
    storage_cost_micros = serializers.IntegerField()
    spent_micros = serializers.IntegerField()
    cost_without_cache_micros = serializers.IntegerField()
    saved_micros = serializers.IntegerField()


class SpendOut(serializers.Serializer[dict[str, Any]]):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    group_by = serializers.CharField()
    rows = SpendRowOut(many=True)


class SavingsOut(serializers.Serializer[dict[str, Any]]):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    spent_micros = serializers.IntegerField()
    request_cost_micros = serializers.IntegerField()
    storage_cost_micros = serializers.IntegerField()
    cost_without_cache_micros = serializers.IntegerField()
    saved_micros = serializers.IntegerField()
    requests = serializers.IntegerField()
    unpriced_requests = serializers.IntegerField(
        help_text="Requests booked without a price (cost 0): the figures are incomplete."
    )
    hit_ratio = serializers.DecimalField(max_digits=6, decimal_places=4)


class BudgetPeriodOut(serializers.Serializer[BudgetPeriod]):
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    spent_micros = serializers.IntegerField()
    reserved_micros = serializers.IntegerField()
    limit_micros = serializers.IntegerField()


class BudgetOut(serializers.ModelSerializer[Budget]):
    current_period = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "name",
            "principal",
            "period",
            "starts_at",
            "ends_at",
            "limit_micros",
            "thresholds",
            "hard_limit",
            "webhook_url",
            "created_at",
            "updated_at",
            "archived_at",
            "current_period",
        ]
        read_only_fields = fields

    @extend_schema_field(BudgetPeriodOut(allow_null=True))
    def get_current_period(self, budget: Budget) -> dict[str, Any] | None:
        period = self.context.get("periods", {}).get(budget.pk)
        return BudgetPeriodOut(period).data if period is not None else None


class BudgetSecretOut(BudgetOut):
    webhook_secret = serializers.CharField(
        help_text="HMAC-SHA256 key of the alert webhooks. Shown only now; store it."
    )

    class Meta(BudgetOut.Meta):
        fields = [*BudgetOut.Meta.fields, "webhook_secret"]
        read_only_fields = fields


class BudgetCreateInput(serializers.Serializer[None]):
    name = serializers.CharField(max_length=100, validators=[display_text_validator])
    period = serializers.CharField(max_length=16, help_text="day, month or custom (UTC).")
    limit_micros = serializers.IntegerField(help_text="Integer micro-USD (1 USD = 1000000).")
    thresholds = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        max_length=50,
        help_text="Whole percentages 1-100 (default 50, 80, 100); one alert each per period.",
    )
    hard_limit = serializers.BooleanField(required=False, default=True)
    principal = serializers.UUIDField(
        required=False, allow_null=True, help_text="A service account of this tenant."
    )
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(required=False, allow_null=True)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class BudgetUpdateInput(serializers.Serializer[None]):
    name = serializers.CharField(
        max_length=100, required=False, validators=[display_text_validator]
    )
    limit_micros = serializers.IntegerField(required=False)
    thresholds = serializers.ListField(
        child=serializers.IntegerField(), required=False, max_length=50
    )
    hard_limit = serializers.BooleanField(required=False)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    period = serializers.CharField(required=False, help_text="Immutable: rejected if given.")


class BudgetAlertOut(serializers.ModelSerializer[BudgetAlert]):
    budget_name = serializers.CharField(source="budget.name")
    period_start = serializers.DateTimeField(source="period.period_start")
    period_end = serializers.DateTimeField(source="period.period_end")

    class Meta:
        model = BudgetAlert
        fields = [
            "id",
            "budget",
            "budget_name",
            "period_start",
            "period_end",
            "threshold",
            "spent_micros",
            "limit_micros",
            "created_at",
            "webhook_state",
            "webhook_attempts",
            "webhook_last_error",
            "webhook_delivered_at",
        ]
        read_only_fields = fields


class BreakEvenInput(serializers.Serializer[None]):
    provider = ProviderField()
    model = serializers.CharField(max_length=200, required=False, allow_blank=True)
    pool = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="For provider vllm: the worker pool.",
    )
    context_tokens = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    queries_per_hour = serializers.DecimalField(max_digits=14, decimal_places=4, min_value=0)
    ttl_seconds = serializers.IntegerField(min_value=1, max_value=366 * 86400)
    input_tokens_per_day = serializers.IntegerField(required=False, min_value=0, max_value=10**15)
    hit_ratio = serializers.DecimalField(
        max_digits=6, decimal_places=4, required=False, min_value=0, max_value=1
    )
    days = serializers.IntegerField(required=False, min_value=1, max_value=366, default=30)


class BlendedOut(serializers.Serializer[dict[str, Any]]):
    blended_input_per_mtok = serializers.DecimalField(max_digits=20, decimal_places=6)
    daily_cost_micros = serializers.IntegerField()
    daily_cost_without_cache_micros = serializers.IntegerField()
    period_cost_micros = serializers.IntegerField()
    period_cost_without_cache_micros = serializers.IntegerField()
    days = serializers.IntegerField()


class BreakEvenOut(serializers.Serializer[dict[str, Any]]):
    mode = serializers.ChoiceField(choices=["storage", "write_premium"])
    context_tokens = serializers.IntegerField()
    queries_per_hour = serializers.DecimalField(max_digits=14, decimal_places=4)
    ttl_seconds = serializers.IntegerField()
    miss_cost_micros = serializers.IntegerField()
    hit_cost_micros = serializers.IntegerField()
    create_cost_micros = serializers.IntegerField()
    storage_per_hour_micros = serializers.IntegerField()
    hourly_cost_without_cache_micros = serializers.IntegerField()
    hourly_cost_with_cache_micros = serializers.IntegerField()
    hourly_saving_micros = serializers.IntegerField()
    breakeven_queries_per_hour = serializers.CharField(help_text="Decimal, or 'Infinity'.")
    breakeven_queries_per_hour_incl_create = serializers.CharField()
    price_version = serializers.CharField()
    blended = BlendedOut(required=False, allow_null=True)
