"""Price-book shapes: model and pool price versions out, their rate inputs in."""

from __future__ import annotations

from rest_framework import serializers

from billing.api.serializers.fields import ProviderField, rate_field
from billing.models import (
    ModelPrice,
    PoolPrice,
)

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
    input_per_mtok = rate_field()
    cached_input_per_mtok = rate_field()
    output_per_mtok = rate_field()
    cache_write_5m_per_mtok = rate_field(required=False, allow_null=True, help_text=_NO_PREMIUM)
    cache_write_1h_per_mtok = rate_field(required=False, allow_null=True, help_text=_NO_PREMIUM)
    storage_per_mtok_hour = rate_field(required=False, allow_null=True, help_text="Default 0.")
    long_threshold_tokens = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**31 - 1,
        help_text="Prompts above this many tokens use the long_* rates.",
    )
    long_input_per_mtok = rate_field(required=False, allow_null=True)
    long_cached_input_per_mtok = rate_field(required=False, allow_null=True)
    long_cache_write_5m_per_mtok = rate_field(required=False, allow_null=True)
    long_cache_write_1h_per_mtok = rate_field(required=False, allow_null=True)
    long_output_per_mtok = rate_field(required=False, allow_null=True)
    long_threshold_basis = serializers.ChoiceField(
        choices=["prompt", "uncached_prompt"],
        required=False,
        help_text="Which tokens count towards the threshold (default: every prompt token).",
    )
    long_storage_per_mtok_hour = rate_field(required=False, allow_null=True)
    thinking_per_mtok = rate_field(required=False, allow_null=True, help_text="Default: output.")
    audio_input_per_mtok = rate_field(required=False, allow_null=True, help_text="Default: input.")
    audio_cached_input_per_mtok = rate_field(required=False, allow_null=True)
    audio_output_per_mtok = rate_field(
        required=False, allow_null=True, help_text="Default: output."
    )
    time_discounts = DiscountWindowIn(many=True, required=False)
    # A field named "source": the serializer metaclass moves declared fields off the class,
    # so it never shadows Field.source at runtime; the stubs see a class attribute.
    source = serializers.CharField(max_length=2000, help_text="Where the price comes from.")  # type: ignore[assignment]
    note = serializers.CharField(max_length=500, required=False, allow_blank=True)


class ModelPriceCorrectInput(ModelRatesInput):
    """A correction names only what was wrong; every other rate of the version is kept."""

    input_per_mtok = rate_field(required=False)
    cached_input_per_mtok = rate_field(required=False)
    output_per_mtok = rate_field(required=False)


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
    gpu_hour_usd = rate_field()
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
