"""Reads of the gateway app: rate limits."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from gateway.models import RateLimit
from tenants.models import Tenant


def rate_limit_list(*, tenant: Tenant) -> QuerySet[RateLimit]:
    """The tenant's rate limits (tenant-wide first, then per key)."""
    return RateLimit.objects.filter(tenant=tenant).order_by("-id")


def rate_limit_get(*, tenant: Tenant, rate_limit_id: str) -> RateLimit | None:
    return RateLimit.objects.filter(tenant=tenant, pk=rate_limit_id).first()


@dataclass(frozen=True)
class Limits:
    """One scope's limits (None: unlimited)."""

    requests_per_minute: int | None
    tokens_per_minute: int | None
    concurrent_requests: int | None

    @property
    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.requests_per_minute, self.tokens_per_minute, self.concurrent_requests)
        )


@dataclass(frozen=True)
class CallerLimits:
    """What the gateway enforces for one key: its own row, its tenant's, the weight."""

    key: Limits | None
    tenant: Limits | None
    weight: int


def rate_limits_for_key(*, tenant_id: str, api_key_id: str) -> CallerLimits:
    """The limits that apply to a key (one query; the gateway caches it a few seconds)."""
    rows = list(
        RateLimit.objects.filter(tenant_id=tenant_id).filter(
            Q(api_key__isnull=True) | Q(api_key_id=api_key_id)
        )
    )
    key = next((r for r in rows if r.api_key_id is not None), None)
    tenant = next((r for r in rows if r.api_key_id is None), None)

    def limits(row: RateLimit | None) -> Limits | None:
        if row is None:
            return None
        found = Limits(row.requests_per_minute, row.tokens_per_minute, row.concurrent_requests)
        return found if found.any else None

    return CallerLimits(
        key=limits(key), tenant=limits(tenant), weight=tenant.weight if tenant else 1
    )
