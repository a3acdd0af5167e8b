"""The price book: versioned model prices and GPU pool prices (never overlapping)."""

from __future__ import annotations

from typing import TypedDict

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import F, Func, Q


class _DecimalShape(TypedDict):
    max_digits: int
    decimal_places: int


RATE: _DecimalShape = {"max_digits": 16, "decimal_places": 6}


class Provider(models.TextChoices):
    VERTEX = "vertex", "Google Vertex AI"
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI"
    DEEPSEEK = "deepseek", "DeepSeek"
    VLLM = "vllm", "Self-hosted vLLM workers"


class _TsTzRange(Func):
    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


def _effective_range() -> _TsTzRange:
    # '[)' : effective_from inclusive, effective_to exclusive; NULL upper bound = open.
    return _TsTzRange("effective_from", "effective_to", models.Value("[)"))


class PriceVersionBase(models.Model):
    """One dated version of a price; history is never rewritten.

    A version covers ``[effective_from, effective_to)`` (``effective_to`` null: open).
    A price change adds a version and closes the open one at its start; a correction
    adds a version over the same range and marks the mistaken one ``superseded_at`` /
    ``superseded_by``. Live (non-superseded) ranges of one key never overlap: a
    PostgreSQL exclusion constraint enforces it even under concurrent writers.
    """

    version = models.PositiveIntegerField()
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    source = models.TextField(help_text="Where this price comes from (quoted source text).")
    note = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True

    @property
    def is_live(self) -> bool:
        return self.superseded_at is None


class ModelPrice(PriceVersionBase):
    """Per-token prices of one (provider, model), in USD per 1M tokens.

    Cache writes: Anthropic-style providers charge a premium (5-minute and 1-hour TTL);
    Vertex bills cache creation at the input price; OpenAI before GPT-5.6 charges nothing
    extra. Multipliers are resolved into absolute rates when a version is written (the
    source text records them). ``long_*`` rates apply to a whole request whose tier count
    (``long_threshold_basis``: every prompt token, or only the uncached ones) is above
    ``long_threshold_tokens``. Thinking and audio rates left null are the text rate of
    the same line. ``time_discounts`` lists daily UTC windows with a percentage off
    (DeepSeek's off-peak hours): ``[{"start": "16:30", "end": "00:30", "percent": 50}]``.
    """

    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    input_per_mtok = models.DecimalField(**RATE)
    cached_input_per_mtok = models.DecimalField(**RATE)
    cache_write_5m_per_mtok = models.DecimalField(**RATE)
    cache_write_1h_per_mtok = models.DecimalField(**RATE)
    storage_per_mtok_hour = models.DecimalField(**RATE, default=0)
    output_per_mtok = models.DecimalField(**RATE)
    long_threshold_tokens = models.PositiveIntegerField(null=True, blank=True)
    long_input_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    long_cached_input_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    long_cache_write_5m_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    long_cache_write_1h_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    long_output_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    long_threshold_basis = models.CharField(max_length=16, default="prompt", db_default="prompt")
    long_storage_per_mtok_hour = models.DecimalField(**RATE, null=True, blank=True)
    thinking_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    audio_input_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    audio_cached_input_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    audio_output_per_mtok = models.DecimalField(**RATE, null=True, blank=True)
    time_discounts = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model", "version"], name="model_price_unique_version"
            ),
            ExclusionConstraint(
                name="model_price_no_overlap",
                expressions=[
                    ("provider", RangeOperators.EQUAL),
                    ("model", RangeOperators.EQUAL),
                    (_effective_range(), RangeOperators.OVERLAPS),
                ],
                condition=Q(superseded_at__isnull=True),
            ),
            models.CheckConstraint(
                name="model_price_range_ordered",
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=F("effective_from")),
            ),
            models.CheckConstraint(
                name="model_price_rates_non_negative",
                condition=Q(
                    input_per_mtok__gte=0,
                    cached_input_per_mtok__gte=0,
                    cache_write_5m_per_mtok__gte=0,
                    cache_write_1h_per_mtok__gte=0,
                    storage_per_mtok_hour__gte=0,
                    output_per_mtok__gte=0,
                ),
            ),
        ]
        indexes = [models.Index(fields=["provider", "model", "effective_from"])]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model} v{self.version}"


class PoolPrice(PriceVersionBase):
    """GPU chargeback price of a self-hosted worker pool (keyed by the pool's name).

    The workers app does not exist yet, so pools are referred to by a string. The
    throughput figures turn a GPU-hour into per-token and per-block-hour prices (see
    ``billing.pricing.PoolRates``).
    """

    pool = models.CharField(max_length=100)
    gpu_hour_usd = models.DecimalField(**RATE)
    prefill_tokens_per_gpu_second = models.DecimalField(max_digits=16, decimal_places=3)
    decode_tokens_per_gpu_second = models.DecimalField(max_digits=16, decimal_places=3)
    kv_blocks_per_gpu = models.PositiveIntegerField()
    kv_block_tokens = models.PositiveIntegerField(default=16)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pool", "version"], name="pool_price_unique_version"),
            ExclusionConstraint(
                name="pool_price_no_overlap",
                expressions=[
                    ("pool", RangeOperators.EQUAL),
                    (_effective_range(), RangeOperators.OVERLAPS),
                ],
                condition=Q(superseded_at__isnull=True),
            ),
            models.CheckConstraint(
                name="pool_price_range_ordered",
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=F("effective_from")),
            ),
            models.CheckConstraint(
                name="pool_price_positive",
                condition=Q(
                    gpu_hour_usd__gte=0,
                    prefill_tokens_per_gpu_second__gt=0,
                    decode_tokens_per_gpu_second__gt=0,
                    kv_blocks_per_gpu__gt=0,
                    kv_block_tokens__gt=0,
                ),
            ),
        ]
        indexes = [models.Index(fields=["pool", "effective_from"])]

    def __str__(self) -> str:
        return f"pool:{self.pool} v{self.version}"
