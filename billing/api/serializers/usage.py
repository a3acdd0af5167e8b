"""Usage and spend shapes: ledger rows, range queries, spend rows and savings."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from billing.api.serializers.fields import ProviderField
from billing.models import (
    UsageRecord,
)
from billing.pricing import COUNT_FIELDS


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
            *COUNT_FIELDS,
            "kind",
            "ttft_ms",
            "latency_ms",
            "status",
            "stream",
            "price_version",
            "pool_price",
            "unpriced",
            "estimated",
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

    estimated = serializers.BooleanField(
        read_only=True,
        help_text="True when the cost is the request's reservation, not priced counts (a "
        "timeout, or a stream cut before the usage of a provider that bills output it does "
        "not stream): correct it with POST …/usage/{request_id}/correction.",
    )

    def get_unpriced(self, row: UsageRecord) -> bool:
        return row.price_version_id is None and row.pool_price_id is None


def _count(help_text: str, *, required: bool = False) -> serializers.IntegerField:
    # No range here: the service refuses negative or impossible counts (invalid_usage).
    if required:
        return serializers.IntegerField(help_text=help_text)
    return serializers.IntegerField(required=False, default=0, help_text=help_text)


class UsageCorrectionInput(serializers.Serializer[None]):
    """The counts the provider reported for an estimated ledger row (its usage object),
    in the ledger's convention: ``prompt_tokens`` is every input token (cached reads,
    cache writes and audio are parts of it); ``output_tokens`` the text output
    (reasoning included where the provider bills it as output), audio output apart."""

    prompt_tokens = _count("Every input token, cached and audio ones included.", required=True)
    output_tokens = _count("Output tokens (reasoning included), audio output apart.", required=True)
    cached_read_tokens = _count("Of prompt_tokens: read from a cache.")
    cache_write_5m_tokens = _count("Of prompt_tokens: written to a 5-minute cache entry.")
    cache_write_1h_tokens = _count("Of prompt_tokens: written to a 1-hour cache entry.")
    thinking_tokens = _count("Thinking tokens billed on top of output_tokens (Gemini).")
    audio_prompt_tokens = _count("Of prompt_tokens: audio.")
    audio_cached_read_tokens = _count("Of cached_read_tokens: audio.")
    audio_output_tokens = _count("Audio output tokens, on top of output_tokens.")


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
