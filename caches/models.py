"""Cache objects (Cacheplane's inventory of reusable contexts) and their operations."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantScopedManager


class Provider(models.TextChoices):
    VERTEX = "vertex", "Vertex AI"
    VLLM = "vllm", "vLLM workers"


class TtlPolicy(models.TextChoices):
    FIXED = "fixed", "Fixed: expires at expire_at unless extended"
    SLIDING = "sliding", "Sliding: extended on use"
    ECONOMIC = "economic", "Economic: extended while it saves more than it costs"


class CacheState(models.TextChoices):
    PENDING = "pending", "Pending"
    CREATING = "creating", "Creating"
    ACTIVE = "active", "Active"
    REFRESHING = "refreshing", "Refreshing"
    EVICTING = "evicting", "Evicting"
    EVICTED = "evicted", "Evicted"
    EXPIRED = "expired", "Expired"
    FAILED = "failed", "Failed"


LIVE_STATES = (
    CacheState.PENDING,
    CacheState.CREATING,
    CacheState.ACTIVE,
    CacheState.REFRESHING,
)
TERMINAL_STATES = (CacheState.EVICTED, CacheState.EXPIRED, CacheState.FAILED)

# Allowed transitions; anything else is a bug and raises.
TRANSITIONS: dict[str, set[str]] = {
    CacheState.PENDING: {CacheState.CREATING, CacheState.FAILED, CacheState.EVICTING},
    CacheState.CREATING: {CacheState.ACTIVE, CacheState.FAILED, CacheState.EVICTING},
    CacheState.ACTIVE: {
        CacheState.REFRESHING,
        CacheState.EVICTING,
        CacheState.EXPIRED,
        CacheState.ACTIVE,
    },
    CacheState.REFRESHING: {
        CacheState.ACTIVE,
        CacheState.EXPIRED,
        CacheState.EVICTING,
        CacheState.FAILED,
    },
    CacheState.EVICTING: {CacheState.EVICTED, CacheState.EXPIRED},
    CacheState.EVICTED: set(),
    CacheState.EXPIRED: set(),
    CacheState.FAILED: set(),
}


class CacheObject(models.Model):
    """One reusable context of a tenant, on Vertex AI or pinned on vLLM workers.

    ``content_digest`` (SHA-256 of the canonical content) is the ETag: within a tenant,
    a live cache with the same digest, provider and model is reused instead of paying
    storage twice (a partial unique index enforces it under races).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="caches")
    name = models.CharField(max_length=100)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    model = models.CharField(max_length=200)
    content = models.JSONField()
    content_digest = models.CharField(max_length=64)
    token_count = models.PositiveIntegerField(null=True, blank=True)
    ttl_policy = models.CharField(max_length=16, choices=TtlPolicy.choices, default=TtlPolicy.FIXED)
    ttl_seconds = models.PositiveIntegerField()
    expire_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=CacheState.choices, default=CacheState.PENDING)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    last_error = models.TextField(blank=True)
    last_error_code = models.CharField(max_length=64, blank=True)
    remote_name = models.CharField(max_length=300, blank=True)
    vertex_project = models.CharField(max_length=100, blank=True)
    vertex_location = models.CharField(max_length=64, blank=True)
    placement = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    replication_factor = models.PositiveSmallIntegerField(default=1)
    # vLLM: the worker pool holding the prefix (its GPU price prices the storage), and what
    # the last probe found resident (the fewest cached tokens over the placement); a probe
    # that found fewer than the whole prefix records when (``evicted_seen_at``: the console
    # alerts). Empty / null on Vertex.
    pool = models.CharField(max_length=100, blank=True)
    resident_tokens = models.PositiveIntegerField(null=True, blank=True)
    resident_checked_at = models.DateTimeField(null=True, blank=True)
    evicted_seen_at = models.DateTimeField(null=True, blank=True)
    prewarm_cron = models.CharField(max_length=100, blank=True)
    next_prewarm_at = models.DateTimeField(null=True, blank=True)
    next_refresh_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    hit_count = models.PositiveBigIntegerField(default=0)
    hit_tokens = models.PositiveBigIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    query_rate_ewma = models.FloatField(default=0.0, help_text="Queries per hour (EWMA).")
    # The budget hold on the storage cost of the requested TTL (billing), settled with the
    # accrued storage when the cache ends.
    budget_reservation_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider", "model", "content_digest"],
                condition=models.Q(state__in=[s.value for s in LIVE_STATES]),
                name="cache_one_live_copy_per_digest",
            ),
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=models.Q(state__in=[s.value for s in LIVE_STATES]),
                name="cache_live_name_unique_per_tenant",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "state", "created_at"]),
            models.Index(fields=["tenant", "created_at"]),
            # The TTL sweeper reads only due live caches through this partial index, so its
            # cost grows with the due caches, not with all caches.
            models.Index(
                fields=["expire_at"],
                condition=models.Q(state__in=["active", "refreshing"]),
                name="cache_due_expiry_idx",
            ),
            models.Index(
                fields=["next_refresh_at"],
                condition=models.Q(state="active"),
                name="cache_due_refresh_idx",
            ),
            models.Index(
                fields=["next_prewarm_at"],
                condition=models.Q(state="active"),
                name="cache_due_prewarm_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider}:{self.model}, {self.state})"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES


class OperationKind(models.TextChoices):
    CREATE = "create", "Create"
    REFRESH = "refresh", "Refresh"
    EVICT = "evict", "Evict"


class OperationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class CacheOperation(models.Model):
    """One asynchronous operation on a cache; the Celery task is an idempotent worker on it.

    ``lease_until`` marks a running attempt; reconciliation re-enqueues operations whose
    lease lapsed (their worker died).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    cache = models.ForeignKey(CacheObject, on_delete=models.PROTECT, related_name="operations")
    kind = models.CharField(max_length=16, choices=OperationKind.choices)
    status = models.CharField(
        max_length=16, choices=OperationStatus.choices, default=OperationStatus.PENDING
    )
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    params = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="cache_operation_idempotency_key_unique",
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "created_at"]),
            models.Index(
                fields=["lease_until"],
                condition=models.Q(status__in=["pending", "running"]),
                name="cache_op_open_lease_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.cache_id} ({self.status})"


class CacheTransition(models.Model):
    """One state change of a cache, for the lifecycle timeline."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    cache = models.ForeignKey(CacheObject, on_delete=models.PROTECT, related_name="transitions")
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    reason = models.CharField(max_length=300, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        indexes = [models.Index(fields=["tenant", "cache", "at"])]

    def __str__(self) -> str:
        return f"{self.cache_id}: {self.from_state} → {self.to_state}"


class TenantCacheSettings(models.Model):
    """Per-tenant provider configuration.

    A tenant with its own GCP project gets the provider's isolation (its caches live in
    its project). Credentials are never stored here: ``vertex_credentials_file`` names a
    service-account JSON file on the control plane's hosts (mounted secret).
    """

    tenant = models.OneToOneField(
        Tenant, on_delete=models.PROTECT, primary_key=True, related_name="cache_settings"
    )
    vertex_project = models.CharField(max_length=100, blank=True)
    vertex_location = models.CharField(max_length=64, blank=True)
    vertex_credentials_file = models.CharField(max_length=500, blank=True)
    gcs_bucket_allow_list = ArrayField(models.CharField(max_length=222), default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    def __str__(self) -> str:
        return f"cache settings of {self.tenant_id}"


class ReconcileRun(models.Model):
    """What one reconciliation pass found, for drift reporting."""

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=300)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    checked = models.PositiveIntegerField(default=0)
    expired = models.PositiveIntegerField(default=0)
    adopted = models.PositiveIntegerField(default=0)
    deleted_orphans = models.PositiveIntegerField(default=0)
    requeued = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"reconcile {self.scope} @ {self.started_at}"
