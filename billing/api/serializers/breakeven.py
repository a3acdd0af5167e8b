"""Break-even calculator shapes: what to compare in, the verdict and blended rates out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from billing.api.serializers.fields import ProviderField


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
