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
from frontend.limits_context import limit_form_prefix, limit_key_choices
from frontend.requests import TenantPageRequest
from frontend.views import tenant_page
from frontend.views_manage import budgets_render
from gateway import selectors as limit_selectors
from gateway import services as limit_services
from gateway.models import RateLimit


def _budgets_page(request: TenantPageRequest, **bound: Any) -> HttpResponse:
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
    form = f.RateLimitForm(request.POST, prefix="rl", keys=limit_key_choices(tenant, set()))
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
    form.set_keys(limit_key_choices(tenant, taken))
    return _budgets_page(request, limit_form=form)


@tenant_page("budgets.update")
@require_POST
def rate_limit_edit(request: TenantPageRequest, limit_id: str) -> HttpResponse:
    """Change a scope's limits (an emptied field becomes unlimited)."""
    limit = _limit(request, limit_id)
    form = f.RateLimitEditForm(
        request.POST, prefix=limit_form_prefix(limit), for_key=limit.api_key_id is not None
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
