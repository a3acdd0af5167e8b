"""Billing: the price book, the usage ledger and its rollups, storage accruals, budgets.

Money is booked as integer nano-USD (``*_nanos``, 1 USD = 10^9) in the ledger, the
rollups and the storage accruals; each such row also carries its µ$ figure
(``*_micros``, the nanos rounded once, half-even) for readers that show micro-USD.
Budgets count whole µ$. Per-token rates are exact decimals in USD per 1M tokens; see
``billing.pricing`` for the arithmetic and the rounding rule.
"""

from __future__ import annotations

import secrets
import uuid
from typing import TypedDict

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import ArrayField, DateTimeRangeField, RangeOperators
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import F, Func, Q

from tenants.models import Tenant
from tenants.scoping import TenantScopedManager


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


class UsageStatus(models.TextChoices):
    OK = "ok", "OK"
    UPSTREAM_ERROR = "upstream_error", "Upstream error"
    CLIENT_DISCONNECT = "client_disconnect", "Client disconnected"


class UsageKind(models.TextChoices):
    REQUEST = "request", "A request through the gateway"
    CACHE_CREATE = "cache_create", "Writing an explicit cache (Vertex creation)"


class UsageRecord(models.Model):
    """One request through the gateway: raw counts, the price applied and its cost.

    Not the audit log: ``billing reprice`` may rewrite the cost columns after a price
    correction (the reprice itself is audited). Written in batches by the flush task;
    ``(tenant, request_id)`` makes the flush idempotent. Rows without a price at their
    time keep ``cost_nanos = 0`` and no price reference until a reprice finds one (the
    API counts them as ``unpriced``). ``kind`` tells requests from cache creations (the
    write of an explicit cache's tokens, which costs money and saves none).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    request_id = models.CharField(max_length=128)
    occurred_at = models.DateTimeField(help_text="When the request started (prices apply here).")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    worker = models.CharField(max_length=200, blank=True)
    pool = models.CharField(max_length=100, blank=True)
    api_key_id = models.UUIDField(null=True, blank=True)
    principal_id = models.UUIDField(null=True, blank=True)
    cache_id = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    prompt_tokens = models.PositiveIntegerField(default=0)
    cached_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_5m_tokens = models.PositiveIntegerField(default=0)
    cache_write_1h_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    thinking_tokens = models.PositiveIntegerField(default=0, db_default=0)
    audio_prompt_tokens = models.PositiveIntegerField(default=0, db_default=0)
    audio_cached_read_tokens = models.PositiveIntegerField(default=0, db_default=0)
    audio_output_tokens = models.PositiveIntegerField(default=0, db_default=0)
    kind = models.CharField(
        max_length=16,
        choices=UsageKind.choices,
        default=UsageKind.REQUEST,
        db_default=UsageKind.REQUEST,
    )
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=24, choices=UsageStatus.choices, default=UsageStatus.OK)
    stream = models.BooleanField(default=False)
    # No database-level FK on the ledger's price references: the per-row RI check costs
    # ~10 % of ingest, and price versions are never deleted (PROTECT in the ORM, no API).
    price_version = models.ForeignKey(
        ModelPrice,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
    )
    pool_price = models.ForeignKey(
        PoolPrice,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
    )
    cost_nanos = models.BigIntegerField(default=0, db_default=0)
    cost_without_cache_nanos = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0)
    cost_without_cache_micros = models.BigIntegerField(default=0)
    recorded_at = models.DateTimeField(auto_now_add=True)
    repriced_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "request_id"], name="usage_record_unique_request"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "occurred_at"]),
            models.Index(
                fields=["tenant", "cache_id", "occurred_at"],
                condition=Q(cache_id__isnull=False),
                name="usage_record_cache_idx",
            ),
            # Cross-tenant time scans (reprice --since): BRIN is tiny and nearly free to
            # maintain on an append-mostly, time-ordered table.
            BrinIndex(fields=["occurred_at"], name="usage_record_time_brin"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.request_id}"


class Granularity(models.TextChoices):
    MINUTE = "minute", "Minute"
    DAY = "day", "Day"


class UsageRollup(models.Model):
    """Per-minute and per-day totals by tenant, provider and model.

    Incremented by the flush (``INSERT ... ON CONFLICT DO UPDATE``) for newly inserted
    ledger rows only, and adjusted by reprice deltas; kept forever. The nano columns are
    the exact sums; ``cost_micros`` is always ``cost_nanos`` rounded once (half-even), so
    a rollup's µ$ figure is the price of the sum, not a sum of rounded prices.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    granularity = models.CharField(max_length=8, choices=Granularity.choices)
    bucket = models.DateTimeField()
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    requests = models.BigIntegerField(default=0)
    error_requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    cached_read_tokens = models.BigIntegerField(default=0)
    cache_write_5m_tokens = models.BigIntegerField(default=0)
    cache_write_1h_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    thinking_tokens = models.BigIntegerField(default=0, db_default=0)
    audio_prompt_tokens = models.BigIntegerField(default=0, db_default=0)
    audio_output_tokens = models.BigIntegerField(default=0, db_default=0)
    unpriced_requests = models.BigIntegerField(default=0, db_default=0)
    cost_nanos = models.BigIntegerField(default=0, db_default=0)
    cost_without_cache_nanos = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0)
    cost_without_cache_micros = models.BigIntegerField(default=0)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "granularity", "bucket", "provider", "model"],
                name="usage_rollup_unique_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.granularity} {self.bucket:%Y-%m-%dT%H:%M} {self.model}"


class StorageAccrual(models.Model):
    """Storage cost of one cache within one clock hour, prorated to the seconds it lived.

    One row per ``(tenant, cache_id, hour, tokens)``; repeated or overlapping reports of
    the same hour widen ``[covered_from, covered_to)`` instead of adding a second charge,
    so the accrual is idempotent and never extends past the end the caller reports
    (eviction). When a cache's token count changes mid-hour, the new count gets its own
    row from the end of the old one's coverage: each second is priced at the count it had.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    cache_id = models.CharField(max_length=100)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    pool = models.CharField(max_length=100, blank=True)
    tokens = models.PositiveIntegerField()
    hour = models.DateTimeField()
    covered_from = models.DateTimeField()
    covered_to = models.DateTimeField()
    price_version = models.ForeignKey(
        ModelPrice, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    pool_price = models.ForeignKey(
        PoolPrice, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    cost_nanos = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "cache_id", "hour", "tokens"],
                name="storage_accrual_unique_hour_tokens",
            ),
            models.CheckConstraint(
                name="storage_accrual_covered_ordered",
                condition=Q(covered_to__gte=F("covered_from")),
            ),
        ]
        indexes = [models.Index(fields=["tenant", "hour"])]

    def __str__(self) -> str:
        return f"{self.cache_id} @ {self.hour:%Y-%m-%dT%H}"


class BudgetPeriodKind(models.TextChoices):
    DAY = "day", "Calendar day (UTC)"
    MONTH = "month", "Calendar month (UTC)"
    CUSTOM = "custom", "Custom range"


def _new_webhook_secret() -> str:
    return "whsec_" + secrets.token_hex(24)


class Budget(models.Model):
    """A spend limit of a tenant (or of one of its service accounts) per period.

    ``thresholds`` are percentages that raise one alert each per period; with
    ``hard_limit`` a request that would take spent plus reserved over the limit is refused
    before any work is done. ``webhook_secret`` signs alert webhooks; the API shows it
    only when it is created or rotated.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="A service account of the tenant; null: the whole tenant.",
    )
    name = models.CharField(max_length=100)
    period = models.CharField(max_length=8, choices=BudgetPeriodKind.choices)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    limit_micros = models.BigIntegerField()
    thresholds = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)
    hard_limit = models.BooleanField(default=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=64, default=_new_webhook_secret)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.CheckConstraint(name="budget_limit_positive", condition=Q(limit_micros__gt=0)),
            models.CheckConstraint(
                name="budget_custom_has_range",
                condition=~Q(period="custom")
                | Q(starts_at__isnull=False, ends_at__isnull=False, ends_at__gt=F("starts_at")),
            ),
        ]
        indexes = [models.Index(fields=["tenant", "archived_at", "created_at"])]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.name}"


class BudgetPeriod(models.Model):
    """A budget's counters for one period: what was spent and what is reserved.

    Reservations increment ``reserved_micros`` with one conditional UPDATE (``spent +
    reserved + x <= limit``), which PostgreSQL serializes on the row: concurrent requests
    can never reserve past the limit.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="periods")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    limit_micros = models.BigIntegerField()
    hard_limit = models.BooleanField(default=True)
    spent_micros = models.BigIntegerField(default=0)
    reserved_micros = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "budget", "period_start"], name="budget_period_unique"
            ),
            models.CheckConstraint(
                name="budget_period_reserved_non_negative", condition=Q(reserved_micros__gte=0)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.period_start:%Y-%m-%d}"


class ReservationState(models.TextChoices):
    HELD = "held", "Held"
    SETTLED = "settled", "Settled"
    RELEASED = "released", "Released"
    EXPIRED = "expired", "Expired (released by the sweeper)"


class BudgetReservation(models.Model):
    """Money held against budget periods while a request (or a cache's TTL) runs.

    Settled with the actual cost, released on failure, or expired by a beat task when
    nobody came back (no reservation leaks). ``period_ids`` lists every budget period the
    hold was taken on (a tenant budget and a service-account budget at once).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal_id = models.UUIDField(null=True, blank=True)
    request_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, default="request")
    amount_micros = models.BigIntegerField()
    actual_micros = models.BigIntegerField(null=True, blank=True)
    period_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    state = models.CharField(
        max_length=16, choices=ReservationState.choices, default=ReservationState.HELD
    )
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "request_id"], name="budget_reservation_unique_request"
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"], condition=Q(state="held"), name="reservation_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.amount_micros}µ$ {self.state}"


class WebhookState(models.TextChoices):
    NONE = "none", "No webhook configured"
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class BudgetAlert(models.Model):
    """A budget period crossed a threshold (raised once per threshold per period)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="alerts")
    period = models.ForeignKey(BudgetPeriod, on_delete=models.PROTECT, related_name="alerts")
    threshold = models.PositiveSmallIntegerField()
    spent_micros = models.BigIntegerField()
    limit_micros = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    webhook_state = models.CharField(
        max_length=16, choices=WebhookState.choices, default=WebhookState.NONE
    )
    webhook_attempts = models.PositiveIntegerField(default=0)
    webhook_last_error = models.CharField(max_length=500, blank=True)
    webhook_delivered_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "period", "threshold"], name="budget_alert_once_per_threshold"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.threshold}%"


class TtlProfile(models.Model):
    """What the economic TTL autopilot has learned about one context's reuse.

    Keyed by the content, not by the cache row: a cache that expires and is created
    again for the same content (same tenant, provider, model and digest) continues from
    what was learned instead of starting from zero. ``gaps_seconds`` holds the most
    recent gaps between queries (oldest first, bounded by ``billing.ttl_policy``).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    content_digest = models.CharField(max_length=64)
    gaps_seconds = ArrayField(models.FloatField(), default=list, blank=True)
    last_query_at = models.DateTimeField(null=True, blank=True)
    queries = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider", "model", "content_digest"],
                name="ttl_profile_unique_content",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.model} {self.content_digest[:12]}"
