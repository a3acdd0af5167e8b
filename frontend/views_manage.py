"""Budgets, alert webhooks and caches managed from the console.

Each POST calls the service the REST API calls (``billing.services.budget_crud``,
``caches.services.lifecycle``) with the request's actor, so validation, errors and audit
rows are those of the API. "Extend" only ever lengthens the remaining TTL; "Set TTL" is
the separate action that may shorten it.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django import forms
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing.errors import BudgetExceeded, BudgetNearLimit
from billing.models import Budget
from billing.selectors import budgets as budget_selectors
from billing.services import budget_crud
from caches import catalog
from caches import selectors as cache_selectors
from caches.content import CacheContent
from caches.models import CacheObject, Provider
from caches.services import lifecycle
from controlplane.errors import DomainError
from frontend import forms as f
from frontend.actions import actor, attempt, blank_form, done, invalid, no_store, uuid_or_404
from frontend.limits_context import rate_limit_context
from frontend.requests import TenantPageRequest
from frontend.selectors.budgets import budget_refusal_text, cache_budget_preview
from frontend.selectors.common import budget_display_rows
from frontend.views import _context, cache_page, tenant_page
from tenants.models import Tenant

MICROS = Decimal(1_000_000)


def _budget_rows(tenant: Tenant) -> list[dict[str, Any]]:
    budgets = list(budget_selectors.budget_list(tenant=tenant)[:200])
    figures = budget_display_rows(tenant=tenant, budgets=budgets, at=timezone.now())
    return [
        {
            "budget": b,
            "figure": figure,
            "form": f.BudgetEditForm(
                prefix=f"b{b.pk.hex[:8]}",
                initial={
                    "name": b.name,
                    "limit_usd": Decimal(b.limit_micros) / MICROS,
                    "thresholds": ", ".join(str(t) for t in b.thresholds),
                    "hard_limit": b.hard_limit,
                    "webhook_url": b.webhook_url,
                },
            ),
        }
        for b, figure in zip(budgets, figures, strict=True)
    ]


def budgets_render(request: TenantPageRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    """The budgets page: budgets, alerts and rate limits, with bound forms re-shown."""
    tenant = request.tenant
    rows = _budget_rows(tenant)
    limits = rate_limit_context(tenant, bound=extra)
    edited = extra.pop("edited", None)
    if edited is not None:
        for row in rows:
            if row["budget"].pk == edited[0]:
                row["form"] = edited[1]
    context = _context(
        request,
        tenant=tenant,
        held=request.held,
        rows=rows,
        alerts=budget_selectors.budget_alert_list(tenant=tenant).select_related("budget")[:100],
        budget_form=extra.pop("budget_form", None) or f.BudgetForm(),
        **limits,
        **extra,
    )
    response = render(request, "frontend/budgets.html", context)
    response.status_code = status
    return response


@tenant_page("budgets.get")
def budgets_page(request: TenantPageRequest) -> HttpResponse:
    """Budgets with spend against limit, alert webhooks, alerts; rate limits."""
    return budgets_render(request)


def _micros(usd: Decimal) -> int:
    return int((usd * MICROS).to_integral_value())


@tenant_page("budgets.update")
@require_POST
def budget_create(request: TenantPageRequest) -> HttpResponse:
    """Create a budget; its webhook secret is shown once on this response (no-store)."""
    tenant = request.tenant
    form = f.BudgetForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        budget = attempt(
            form,
            lambda: budget_crud.budget_create(
                actor=actor(request),
                tenant=tenant,
                name=data["name"],
                period=data["period"],
                limit_micros=_micros(data["limit_usd"]),
                thresholds=data["thresholds"],
                hard_limit=data["hard_limit"],
                webhook_url=data.get("webhook_url", ""),
            ),
        )
        if budget is not None:
            return no_store(budgets_render(request, created=budget))
    return budgets_render(request, status=400, budget_form=form)


def _budget(request: TenantPageRequest, budget_id: str) -> Budget:
    budget = budget_selectors.budget_get(tenant=request.tenant, budget_id=uuid_or_404(budget_id))
    if budget is None:
        raise Http404("No such budget.")
    return budget


@tenant_page("budgets.update")
@require_POST
def budget_edit(request: TenantPageRequest, budget_id: str) -> HttpResponse:
    tenant = request.tenant
    budget = _budget(request, budget_id)
    form = f.BudgetEditForm(request.POST, prefix=f"b{budget.pk.hex[:8]}")
    if form.is_valid():
        data = form.cleaned_data
        changes = {
            "name": data["name"],
            "limit_micros": _micros(data["limit_usd"]),
            "thresholds": data["thresholds"],
            "hard_limit": data["hard_limit"],
            "webhook_url": data.get("webhook_url", ""),
        }
        saved = attempt(
            form,
            lambda: budget_crud.budget_update(actor=actor(request), budget=budget, changes=changes),
        )
        if saved is not None:
            return done(request, f"Budget {saved.name} saved.", f"/t/{tenant.slug}/budgets/")
    return budgets_render(request, status=400, edited=(budget.pk, form))


@tenant_page("budgets.update")
@require_POST
def budget_archive(request: TenantPageRequest, budget_id: str) -> HttpResponse:
    tenant = request.tenant
    budget = _budget(request, budget_id)
    budget_crud.budget_archive(actor=actor(request), budget=budget)
    return done(request, f"Budget {budget.name} archived.", f"/t/{tenant.slug}/budgets/")


@tenant_page("budgets.update")
@require_POST
def budget_rotate_secret(request: TenantPageRequest, budget_id: str) -> HttpResponse:
    budget = budget_crud.budget_rotate_secret(
        actor=actor(request), budget=_budget(request, budget_id)
    )
    return no_store(budgets_render(request, created=budget, rotated=True))


# --- Caches -----------------------------------------------------------------------------


def _models_for(provider: str) -> list[str]:
    if provider == Provider.VERTEX:
        return sorted(catalog.VERTEX_MODELS)
    return sorted(catalog.vllm_models())


def _catalog() -> dict[str, list[str]]:
    """Provider → the catalog's models, the choices of the form's Model select."""
    return {
        Provider.VLLM: _models_for(Provider.VLLM),
        Provider.VERTEX: _models_for(Provider.VERTEX),
    }


def _estimate(
    *, provider: str, model: str, content: CacheContent, ttl_seconds: int
) -> dict[str, Any]:
    """Token estimate and storage cost of the requested TTL at today's price (read only)."""
    from billing.services.storage import storage_estimate_micros

    tokens = (
        catalog.vertex_token_estimate(content)
        if provider == Provider.VERTEX
        else max(1, math.ceil(len(content.render_prefix()) / 4))
    )
    try:
        micros = storage_estimate_micros(
            provider=provider,
            model=model,
            tokens=tokens,
            ttl=timedelta(seconds=ttl_seconds),
            at=timezone.now(),
        )
    except DomainError as exc:
        return {
            "tokens": tokens,
            "storage_usd": None,
            "storage_micros": None,
            "unpriced": exc.message,
        }
    return {
        "tokens": tokens,
        "storage_usd": Decimal(micros) / MICROS,
        "storage_micros": micros,
        "unpriced": None,
    }


def _cache_create(request: TenantPageRequest, *, spec: lifecycle.CacheSpec) -> Any:
    """``cache_create``; a budget refusal is re-worded to name the budget and amounts."""
    try:
        return lifecycle.cache_create(
            tenant=request.tenant, actor=actor(request), spec=spec, idempotency_key=None
        )
    except BudgetExceeded as exc:
        text = budget_refusal_text(
            tenant=request.tenant, details=exc.details, near=isinstance(exc, BudgetNearLimit)
        )
        raise type(exc)(text, details=exc.details) from None


@tenant_page("caches.create")
def cache_new(request: TenantPageRequest) -> HttpResponse:
    """Create a cache from content: "Preview" lints and estimates, "Create" creates.

    Preview writes nothing; create calls ``cache_create`` (the API's service) and lands
    on the new cache's page, which follows it from pending to active live.
    """
    tenant = request.tenant
    preview = None
    status = 200
    if request.method == "POST":
        form = f.CacheCreateForm(request.POST, models=_catalog())
        if form.is_valid():
            data = form.cleaned_data
            content = form.content()
            if "preview" in request.POST:
                lint = attempt(form, lambda: lifecycle.cache_lint(content=content))
                if lint is not None:
                    estimate = _estimate(
                        provider=data["provider"],
                        model=data["model"],
                        content=CacheContent.from_dict(content),
                        ttl_seconds=data["ttl_seconds"],
                    )
                    preview = {
                        "findings": lint,
                        **estimate,
                        "budgets": cache_budget_preview(
                            tenant=tenant,
                            principal=request.user,
                            estimate_micros=estimate["storage_micros"],
                        ),
                    }
            else:
                spec = lifecycle.CacheSpec(
                    name=data["name"],
                    provider=data["provider"],
                    model=data["model"],
                    content=content,
                    ttl_seconds=data["ttl_seconds"],
                    ttl_policy=data["ttl_policy"],
                    replication_factor=1,
                    prewarm_cron="",
                )
                outcome = attempt(form, lambda: _cache_create(request, spec=spec))
                if outcome is not None:
                    verb = "Creating" if outcome.created else "Already live:"
                    return done(
                        request,
                        f"{verb} {spec.name}.",
                        f"/t/{tenant.slug}/caches/{outcome.operation.cache_id}/",
                    )
        if not form.is_valid():
            status = 400
    else:
        form = f.CacheCreateForm(initial={"provider": Provider.VLLM}, models=_catalog())
    context = _context(
        request,
        tenant=tenant,
        form=form,
        preview=preview,
        vertex_models=_models_for(Provider.VERTEX),
        vllm_models=_models_for(Provider.VLLM),
    )
    response = render(request, "frontend/cache_new.html", context)
    response.status_code = status
    return response


def _cache(request: TenantPageRequest, cache_id: UUID) -> CacheObject:
    cache = cache_selectors.cache_get(tenant=request.tenant, cache_id=str(cache_id))
    if cache is None:
        raise Http404("No such cache.")
    return cache


def _cache_back(
    request: TenantPageRequest, cache: CacheObject, form: forms.Form, message: str
) -> HttpResponse:
    tenant = request.tenant
    if form.errors:
        request.method = "GET"
        errors = {
            "form": form,
            "message": "; ".join(str(e) for errs in form.errors.values() for e in errs),
        }
        return invalid(cache_page(request, tenant.slug, cache_id=cache.pk, form_errors=errors))
    return done(request, message, f"/t/{tenant.slug}/caches/{cache.pk}/")


@tenant_page("caches.update")
@require_POST
def cache_extend(request: TenantPageRequest, cache_id: UUID) -> HttpResponse:
    """Lengthen the remaining TTL by N seconds (never shortens: that is "Set TTL")."""
    cache = _cache(request, cache_id)
    form = f.CacheExtendForm(request.POST)
    ttl = 0
    if form.is_valid():
        remaining = 0
        if cache.expire_at is not None:
            remaining = max(0, math.ceil((cache.expire_at - timezone.now()).total_seconds()))
        ttl = remaining + form.cleaned_data["extend_by"]
        attempt(
            form,
            lambda: lifecycle.cache_extend_ttl(cache=cache, actor=actor(request), ttl_seconds=ttl),
        )
    return _cache_back(request, cache, form, f"Extending {cache.name} to {ttl} s from now.")


@tenant_page("caches.update")
@require_POST
def cache_set_ttl(request: TenantPageRequest, cache_id: UUID) -> HttpResponse:
    """Set the expiry to now + N seconds, shorter or longer than today's."""
    cache = _cache(request, cache_id)
    form = f.CacheSetTtlForm(request.POST)
    if form.is_valid():
        attempt(
            form,
            lambda: lifecycle.cache_extend_ttl(
                cache=cache, actor=actor(request), ttl_seconds=form.cleaned_data["ttl_seconds"]
            ),
        )
    return _cache_back(request, cache, form, f"Setting the TTL of {cache.name}.")


@tenant_page("caches.update")
@require_POST
def cache_policy(request: TenantPageRequest, cache_id: UUID) -> HttpResponse:
    cache = _cache(request, cache_id)
    form = f.CachePolicyForm(request.POST)
    if form.is_valid():
        attempt(
            form,
            lambda: lifecycle.cache_set_policy(
                cache=cache, actor=actor(request), ttl_policy=form.cleaned_data["ttl_policy"]
            ),
        )
    return _cache_back(request, cache, form, f"Policy of {cache.name} changed.")


@tenant_page("caches.delete")
@require_POST
def cache_evict(request: TenantPageRequest, cache_id: UUID) -> HttpResponse:
    cache = _cache(request, cache_id)
    form = blank_form()
    attempt(form, lambda: lifecycle.cache_evict(cache=cache, actor=actor(request)))
    return _cache_back(request, cache, form, f"Evicting {cache.name}.")
