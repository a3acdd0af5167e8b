"""Rate limits of the data plane, per tenant and per API key."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from tenants.models import ApiKey, Principal, Tenant
from tenants.scoping import TenantScopedManager


class RateLimit(models.Model):
    """Request, token and concurrency limits of a tenant (``api_key`` null) or of one key.

    Every limit left null is unlimited. A request must pass both its key's row and its
    tenant's row. ``weight`` is the tenant's share when a shared worker pool is saturated
    (tenant rows only: twice the weight, twice the admissions under contention).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveBigIntegerField(null=True, blank=True)
    concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    weight = models.PositiveSmallIntegerField(default=1)
    created_by = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(api_key__isnull=True),
                name="ratelimit_one_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["tenant", "api_key"],
                condition=Q(api_key__isnull=False),
                name="ratelimit_one_per_key",
            ),
            models.CheckConstraint(name="ratelimit_weight_positive", condition=Q(weight__gte=1)),
        ]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.api_key_id or 'tenant'}"


class HostedProvider(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI"
    DEEPSEEK = "deepseek", "DeepSeek"


class ProviderCredential(models.Model):
    """A tenant's API key for one hosted provider, sealed (``gateway.credentials``).

    The key is never returned by any API nor logged; the audit log shows it redacted and
    ``fingerprint`` (a SHA-256 prefix) tells a rotation from a re-set of the same key.
    ``cache_autopilot``: whether the gateway places cache breakpoints (Anthropic) or sets
    ``prompt_cache_key`` (OpenAI) for this tenant (``gateway.adapters.autopilot``).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=16, choices=HostedProvider.choices)
    secret_sealed = models.TextField()
    fingerprint = models.CharField(max_length=16)
    cache_autopilot = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider"], name="provider_credential_one_per_provider"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.provider}"
