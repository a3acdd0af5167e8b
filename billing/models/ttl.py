"""What the TTL autopilot learns per context."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from billing.models.prices import Provider
from tenants.models import Tenant
from tenants.scoping import TenantScopedManager


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
