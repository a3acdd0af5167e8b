"""The usage ledger (one row per request or cache creation), its rollups, storage accruals."""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import F, Q

from billing.models.prices import ModelPrice, PoolPrice, Provider
from tenants.models import Tenant
from tenants.scoping import TenantScopedManager


class UsageStatus(models.TextChoices):
    OK = "ok", "OK"
    UPSTREAM_ERROR = "upstream_error", "Upstream error"
    CLIENT_DISCONNECT = "client_disconnect", "Client disconnected"
    UPSTREAM_TIMEOUT = "upstream_timeout", "Timed out after sending (cost estimated)"


class UsageKind(models.TextChoices):
    REQUEST = "request", "A request through the gateway"
    CACHE_CREATE = "cache_create", "Writing an explicit cache (Vertex creation)"
    CACHE_WARMUP = "cache_warmup", "A cache's warm-up or pin-probe prefill (self-hosted)"


class UsageRecord(models.Model):
    """One request through the gateway: raw counts, the price applied and its cost.

    Not the audit log: ``billing reprice`` may rewrite the cost columns after a price
    correction (the reprice itself is audited). Written in batches by the flush task;
    ``(tenant, request_id)`` makes the flush idempotent; ``request_id`` is the ledger key
    the producer mints (the gateway's own, never the client's ``X-Request-Id``, which is
    kept in ``client_request_id``). Rows without a price at their
    time keep ``cost_nanos = 0`` and no price reference until a reprice finds one (the
    API counts them as ``unpriced``). ``kind`` tells requests from cache creations (the
    write of an explicit cache's tokens, which costs money and saves none). ``autopilot``
    is what the cache-breakpoint autopilot did for the request (``gateway.adapters.autopilot``).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    request_id = models.CharField(
        max_length=128, help_text="The ledger key, minted by the booking producer (idempotency)."
    )
    client_request_id = models.CharField(
        max_length=128,
        blank=True,
        default="",
        db_default="",
        help_text="The caller's X-Request-Id (tracing only; never the ledger key).",
    )
    estimated = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Cost is the reservation, booked as an estimate (no usage reported yet).",
    )
    autopilot = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text="The cache autopilot's decision (e.g. 'system:1h,end:5m', "
        "'prompt_cache_key:cp-<family>', 'client', 'none:no_reuse'); blank: it did not run.",
    )
    route = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text="How the gateway placed a vLLM request: the routing mode and its reason "
        "(e.g. 'exact:fresh', 'approximate:stale_index', 'cache'); blank: not routed.",
    )
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
