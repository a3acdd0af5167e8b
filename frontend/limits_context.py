"""The budgets page's rate-limit section, shared by the budgets page (``views_manage``)
and the rate-limit forms (``views_limits``), which re-render that page on bad input."""

from __future__ import annotations

from typing import Any

from frontend import forms as f
from gateway import selectors as limit_selectors
from gateway.models import RateLimit
from tenants import selectors as tenant_selectors
from tenants.models import Tenant

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "weight")


def limit_form_prefix(limit: RateLimit) -> str:
    return f"rl{limit.pk.hex[:8]}"


def limit_key_choices(tenant: Tenant, taken: set[str]) -> list[tuple[str, str]]:
    """Active keys of the tenant that have no limit of their own yet, by name."""
    keys = (
        tenant_selectors.api_key_list(tenant=tenant)
        .filter(revoked_at__isnull=True)
        .select_related("principal")
        .order_by("name")[:500]
    )
    return [
        (str(k.pk), f"key {k.name} ({k.prefix}…, {k.principal.username})")
        for k in keys
        if str(k.pk) not in taken
    ]


def rate_limit_context(tenant: Tenant, *, bound: dict[str, Any]) -> dict[str, Any]:
    """The budgets page's rate-limit section: rows with their edit forms, the new form."""
    limits = list(limit_selectors.rate_limit_list(tenant=tenant).select_related("api_key")[:500])
    limits.sort(key=lambda r: (r.api_key_id is not None, r.api_key.name if r.api_key else ""))
    edited = bound.pop("limit_edited", None)
    rows = []
    for limit in limits:
        if edited is not None and edited[0] == limit.pk:
            form = edited[1]
        else:
            form = f.RateLimitEditForm(
                prefix=limit_form_prefix(limit),
                for_key=limit.api_key_id is not None,
                initial={name: getattr(limit, name) for name in LIMIT_FIELDS},
            )
        rows.append({"limit": limit, "form": form})
    taken = {str(r.api_key_id) for r in limits if r.api_key_id}
    return {
        "limit_rows": rows,
        "has_tenant_limit": any(r.api_key_id is None for r in limits),
        "limit_form": bound.pop("limit_form", None)
        or f.RateLimitForm(prefix="rl", keys=limit_key_choices(tenant, taken)),
        "limit_errors": bound.pop("limit_errors", None),
    }
