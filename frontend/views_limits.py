"""Rate limits managed from the console (on the budgets page).

Each POST calls the service the REST API calls (``gateway.services.rate_limit_*``) with
the request's actor, so validation, error codes and audit rows (``gateway.rate_limit.*``)
are those of ``/api/v1/tenants/{tenant}/rate-limits``. Reading needs ``budgets.get``,
writing ``budgets.update``, as in the API.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_POST

from frontend import forms as f
from frontend.actions import actor, attempt, blank_form, done, uuid_or_404
from frontend.requests import TenantPageRequest
from frontend.views import tenant_page
from gateway import selectors as limit_selectors
from gateway import services as limit_services
from gateway.models import RateLimit
from tenants import selectors as tenant_selectors
from tenants.models import Tenant

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "weight")


def _prefix(limit: RateLimit) -> str:
    return f"rl{limit.pk.hex[:8]}"


def _key_choices(tenant: Tenant, taken: set[str]) -> list[tuple[str, str]]:
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
                prefix=_prefix(limit),
                for_key=limit.api_key_id is not None,
                initial={name: getattr(limit, name) for name in LIMIT_FIELDS},
            )
        rows.append({"limit": limit, "form": form})
    taken = {str(r.api_key_id) for r in limits if r.api_key_id}
    return {
        "limit_rows": rows,
        "has_tenant_limit": any(r.api_key_id is None for r in limits),
        "limit_form": bound.pop("limit_form", None)
        or f.RateLimitForm(prefix="rl", keys=_key_choices(tenant, taken)),
        "limit_errors": bound.pop("limit_errors", None),
    }


def _budgets_page(request: TenantPageRequest, **bound: Any) -> HttpResponse:
    from frontend.views_manage import budgets_render

    return budgets_render(request, status=400, **bound)


def _limit(request: TenantPageRequest, limit_id: str) -> RateLimit:
    found = limit_selectors.rate_limit_get(
        tenant=request.tenant,
        rate_limit_id=uuid_or_404(limit_id),
    )
    if found is None:
        raise Http404("No such rate limit.")
    return found


def _back(request: TenantPageRequest, message: str) -> HttpResponse:
    tenant = request.tenant
    return done(request, message, f"/t/{tenant.slug}/budgets/#rate-limits")


def _scope(limit: RateLimit) -> str:
    return f"key {limit.api_key.name}" if limit.api_key else "the whole tenant"


@tenant_page("budgets.update")
@require_POST
def rate_limit_create(request: TenantPageRequest) -> HttpResponse:
    """Set the limits of the tenant or of one key; bad values are shown by their field."""
    tenant = request.tenant
    taken = {
        str(k)
        for k in limit_selectors.rate_limit_list(tenant=tenant).values_list("api_key_id", flat=True)
        if k
    }
    # Every key of the tenant is a valid choice here (a taken one is the service's
    # rate_limit_exists, shown next to the field, not a silent "invalid choice").
    form = f.RateLimitForm(request.POST, prefix="rl", keys=_key_choices(tenant, set()))
    if form.is_valid():
        key_id = form.cleaned_data.get("api_key") or None
        limit = attempt(
            form,
            lambda: limit_services.rate_limit_create(
                tenant=tenant, actor=actor(request), api_key_id=key_id, values=form.values()
            ),
        )
        if limit is not None:
            return _back(request, f"Rate limit for {_scope(limit)} set.")
    form.set_keys(_key_choices(tenant, taken))
    return _budgets_page(request, limit_form=form)


@tenant_page("budgets.update")
@require_POST
def rate_limit_edit(request: TenantPageRequest, limit_id: str) -> HttpResponse:
    """Change a scope's limits (an emptied field becomes unlimited)."""
    limit = _limit(request, limit_id)
    form = f.RateLimitEditForm(
        request.POST, prefix=_prefix(limit), for_key=limit.api_key_id is not None
    )
    if form.is_valid():
        saved = attempt(
            form,
            lambda: limit_services.rate_limit_update(
                limit=limit, actor=actor(request), changes=form.values()
            ),
        )
        if saved is not None:
            return _back(request, f"Rate limit for {_scope(limit)} saved.")
    return _budgets_page(request, limit_edited=(limit.pk, form))


@tenant_page("budgets.update")
@require_POST
def rate_limit_delete(request: TenantPageRequest, limit_id: str) -> HttpResponse:
    """Remove a rate limit: the scope becomes unlimited."""
    limit = _limit(request, limit_id)
    form = blank_form()
    attempt(form, lambda: limit_services.rate_limit_delete(limit=limit, actor=actor(request)))
    if form.errors:
        return _budgets_page(request, limit_errors=form.non_field_errors())
    return _back(request, f"Rate limit for {_scope(limit)} removed: unlimited.")
