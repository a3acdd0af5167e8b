"""Platform management in the console: tenants, people, the price book and workers.

Each POST calls the service the REST API calls (``tenants.services.tenants``,
``billing.services.prices``, ``workers.services``) with the request's actor; the
``platform_page`` decorator is the access check, and each page shows only the forms the
caller's platform permissions allow.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from billing.models import ModelPrice, PoolPrice
from billing.selectors import prices as price_selectors
from billing.services import prices as price_services
from frontend import forms as f
from frontend import forms_workers, selectors
from frontend.actions import actor, attempt, done
from frontend.requests import PlatformPageRequest
from frontend.views import _context, platform_page
from tenants import selectors as tenant_selectors
from tenants.models import Principal, PrincipalKind, Tenant, TenantState
from tenants.services import tenants as tenant_services
from tenants.services.authorization import principal_permissions
from workers import services as worker_services
from workers.models import Worker

POOL_RATES = (
    "gpu_hour_usd",
    "prefill_tokens_per_gpu_second",
    "decode_tokens_per_gpu_second",
    "kv_blocks_per_gpu",
    "kv_block_tokens",
)
MODEL_RATES = (
    "input_per_mtok",
    "cached_input_per_mtok",
    "output_per_mtok",
    "storage_per_mtok_hour",
)


def _held(request: PlatformPageRequest) -> frozenset[str]:
    """Platform permissions, only to decide which forms to show (POSTs are checked)."""
    return principal_permissions(principal=request.user, tenant=None)


def _render(request: PlatformPageRequest, template: str, status: int, **extra: Any) -> HttpResponse:
    response = render(request, template, _context(request, held=_held(request), **extra))
    response.status_code = status
    return response


# --- Tenants and people -----------------------------------------------------------------


def _tenants_page(request: PlatformPageRequest, *, status: int = 200, **bound: Any) -> HttpResponse:
    tenants = tenant_selectors.tenant_list_all_tenants().order_by("slug")[:1000]
    return _render(
        request,
        "frontend/platform_tenants.html",
        status,
        tenants=tenants,
        people=tenant_selectors.principal_list_humans_all_tenants().order_by("username")[:1000],
        tenant_form=bound.pop("tenant_form", None) or f.TenantCreateForm(),
        human_form=bound.pop("human_form", None) or f.HumanCreateForm(),
        **bound,
    )


@platform_page("tenants.list")
def tenants_page(request: PlatformPageRequest) -> HttpResponse:
    """Every tenant with create, rename, suspend and resume; human principals."""
    return _tenants_page(request)


def _tenant(slug: str) -> Tenant:
    tenant = tenant_selectors.tenant_get_by_slug_all_tenants(slug=slug)
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


@platform_page("tenants.manage")
@require_POST
def tenant_create(request: PlatformPageRequest) -> HttpResponse:
    form = f.TenantCreateForm(request.POST)
    if form.is_valid():
        admin = None
        name = form.cleaned_data.get("admin")
        if name:
            admin = Principal.objects.filter(
                username=name, kind=PrincipalKind.HUMAN, is_active=True
            ).first()
            if admin is None:
                form.add_error("admin", "No such person (unknown_principal).")
        if not form.errors:
            tenant = attempt(
                form,
                lambda: tenant_services.tenant_create(
                    actor=actor(request),
                    slug=form.cleaned_data["slug"],
                    display_name=form.cleaned_data["display_name"],
                    admin=admin,
                ),
            )
            if tenant is not None:
                return done(request, f"Tenant {tenant.display_name} created.", "/platform/tenants/")
    return _tenants_page(request, status=400, tenant_form=form)


@platform_page("tenants.manage")
@require_POST
def tenant_rename(request: PlatformPageRequest, slug: str) -> HttpResponse:
    tenant = _tenant(slug)
    form = f.TenantRenameForm(request.POST)
    if form.is_valid():
        saved = attempt(
            form,
            lambda: tenant_services.tenant_update(
                actor=actor(request), tenant=tenant, display_name=form.cleaned_data["display_name"]
            ),
        )
        if saved is not None:
            return done(request, f"Renamed to {saved.display_name}.", "/platform/tenants/")
    return _tenants_page(request, status=400, rename_errors={tenant.slug: form.errors})


def _set_state(request: PlatformPageRequest, slug: str, state: str) -> HttpResponse:
    tenant = _tenant(slug)
    form = f.TenantStateForm(request.POST)
    if form.is_valid():
        saved = attempt(
            form,
            lambda: tenant_services.tenant_set_state(
                actor=actor(request),
                tenant=tenant,
                state=state,
                reason=form.cleaned_data.get("reason", ""),
            ),
        )
        if saved is not None:
            return done(request, f"{saved.display_name} is {saved.state}.", "/platform/tenants/")
    return _tenants_page(request, status=400, rename_errors={tenant.slug: form.errors})


@platform_page("tenants.manage")
@require_POST
def tenant_suspend(request: PlatformPageRequest, slug: str) -> HttpResponse:
    return _set_state(request, slug, TenantState.SUSPENDED)


@platform_page("tenants.manage")
@require_POST
def tenant_resume(request: PlatformPageRequest, slug: str) -> HttpResponse:
    return _set_state(request, slug, TenantState.ACTIVE)


@platform_page("tenants.manage")
@require_POST
def human_create(request: PlatformPageRequest) -> HttpResponse:
    form = f.HumanCreateForm(request.POST)
    if form.is_valid():
        person = attempt(
            form,
            lambda: tenant_services.human_principal_create(
                actor=actor(request),
                username=form.cleaned_data["username"],
                password=form.cleaned_data.get("password") or None,
                email=form.cleaned_data.get("email", ""),
            ),
        )
        if person is not None:
            return done(
                request, f"{person.username} can now be added to tenants.", "/platform/tenants/"
            )
    return _tenants_page(request, status=400, human_form=form)


# --- Price book -------------------------------------------------------------------------


def _prices_page(request: PlatformPageRequest, *, status: int = 200, **bound: Any) -> HttpResponse:
    prices = list(price_selectors.model_price_list(provider=None, model=None)[:500])
    return _render(
        request,
        "frontend/platform_prices.html",
        status,
        prices=prices,
        pool_prices=price_selectors.pool_price_list(pool=None)[:200],
        price_form=bound.pop("price_form", None) or f.ModelPriceForm(),
        correcting=bound.pop("correcting", None),
        correct_form=bound.pop("correct_form", None),
        pool_form=bound.pop("pool_form", None) or f.PoolPriceForm(prefix="pool"),
        correcting_pool=bound.pop("correcting_pool", None),
        pool_correct_form=bound.pop("pool_correct_form", None),
        **bound,
    )


@platform_page("tenants.list")
def prices_page(request: PlatformPageRequest) -> HttpResponse:
    """Model prices (versioned, effective-dated): add a version, correct a mistaken one."""
    correct = request.GET.get("correct", "")
    if correct.isdigit():
        price = ModelPrice.objects.filter(pk=int(correct)).first()
        if price is not None:
            initial = {name: getattr(price, name) for name in MODEL_RATES}
            return _prices_page(
                request,
                correcting=price,
                correct_form=f.PriceCorrectForm(
                    prefix="fix", initial={**initial, "source": price.source}
                ),
            )
    correct_pool = request.GET.get("correct_pool", "")
    if correct_pool.isdigit():
        pool_price = PoolPrice.objects.filter(pk=int(correct_pool)).first()
        if pool_price is not None:
            initial = {name: getattr(pool_price, name) for name in POOL_RATES}
            return _prices_page(
                request,
                correcting_pool=pool_price,
                pool_correct_form=f.PoolPriceCorrectForm(
                    prefix="poolfix", initial={**initial, "source": pool_price.source}
                ),
            )
    return _prices_page(request)


@platform_page("prices.manage")
@require_POST
def pool_price_create(request: PlatformPageRequest) -> HttpResponse:
    """A GPU-hour price version for a worker pool (what vLLM traffic is billed by)."""
    form = f.PoolPriceForm(request.POST, prefix="pool")
    if form.is_valid():
        data = form.cleaned_data
        price = attempt(
            form,
            lambda: price_services.pool_price_create(
                actor=actor(request),
                pool=data["pool"],
                rates={name: data[name] for name in POOL_RATES},
                source=data["source"],
            ),
        )
        if price is not None:
            return done(request, f"Price for pool {price.pool} added.", "/platform/prices/")
    return _prices_page(request, status=400, pool_form=form)


@platform_page("prices.manage")
@require_POST
def pool_price_correct(request: PlatformPageRequest, price_id: int) -> HttpResponse:
    price = PoolPrice.objects.filter(pk=price_id).first()
    if price is None:
        raise Http404("No such price.")
    form = f.PoolPriceCorrectForm(request.POST, prefix="poolfix")
    if form.is_valid():
        data = form.cleaned_data
        fixed = attempt(
            form,
            lambda: price_services.pool_price_correct(
                actor=actor(request),
                price=price,
                rates={name: data[name] for name in POOL_RATES},
                source=data["source"],
                note=data["note"],
            ),
        )
        if fixed is not None:
            return done(request, f"Price for pool {price.pool} corrected.", "/platform/prices/")
    return _prices_page(request, status=400, correcting_pool=price, pool_correct_form=form)


@platform_page("prices.manage")
@require_POST
def price_create(request: PlatformPageRequest) -> HttpResponse:
    form = f.ModelPriceForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        price = attempt(
            form,
            lambda: price_services.model_price_create(
                actor=actor(request),
                provider=data["provider"],
                model=data["model"],
                rates={name: data[name] for name in MODEL_RATES},
                source=data["source"],
            ),
        )
        if price is not None:
            return done(request, f"Price for {price.model} added.", "/platform/prices/")
    return _prices_page(request, status=400, price_form=form)


@platform_page("prices.manage")
@require_POST
def price_correct(request: PlatformPageRequest, price_id: int) -> HttpResponse:
    price = ModelPrice.objects.filter(pk=price_id).first()
    if price is None:
        raise Http404("No such price.")
    form = f.PriceCorrectForm(request.POST, prefix="fix")
    if form.is_valid():
        data = form.cleaned_data
        fixed = attempt(
            form,
            lambda: price_services.model_price_correct(
                actor=actor(request),
                price=price,
                rates={name: data[name] for name in MODEL_RATES},
                source=data["source"],
                note=data["note"],
            ),
        )
        if fixed is not None:
            return done(request, f"Price for {price.model} corrected.", "/platform/prices/")
    return _prices_page(request, status=400, correcting=price, correct_form=form)


# --- Workers ----------------------------------------------------------------------------


def _workers_page(request: PlatformPageRequest, *, status: int = 200, **bound: Any) -> HttpResponse:
    summary = selectors.workers_summary()
    return _render(
        request,
        "frontend/workers.html",
        status,
        summary=summary,
        page_data=summary,
        can_manage_workers="workers.manage" in _held(request),
        worker_form=bound.pop("worker_form", None) or forms_workers.WorkerRegisterForm(),
        **bound,
    )


@platform_page("tenants.list")
def workers_page(request: PlatformPageRequest) -> HttpResponse:
    """Workers with KV pressure over time; register, drain and remove."""
    return _workers_page(request)


@platform_page("workers.manage")
@require_POST
def worker_register(request: PlatformPageRequest) -> HttpResponse:
    form = forms_workers.WorkerRegisterForm(request.POST)
    if form.is_valid():
        worker = attempt(
            form,
            lambda: worker_services.worker_register(actor=actor(request), **form.cleaned_data),
        )
        if worker is not None:
            return done(request, f"Worker {worker.name} registered.", "/platform/workers/")
    return _workers_page(request, status=400, worker_form=form)


def _worker(name: str) -> Worker:
    worker = Worker.objects.filter(name=name).first()
    if worker is None:
        raise Http404("No such worker.")
    return worker


@platform_page("workers.manage")
@require_POST
def worker_drain(request: PlatformPageRequest, name: str) -> HttpResponse:
    worker = _worker(name)
    draining = request.POST.get("undrain") is None
    worker_services.worker_set_draining(actor=actor(request), worker=worker, draining=draining)
    verb = "draining" if draining else "back in rotation"
    return done(request, f"Worker {worker.name} is {verb}.", "/platform/workers/")


@platform_page("workers.manage")
@require_POST
def worker_remove(request: PlatformPageRequest, name: str) -> HttpResponse:
    worker = _worker(name)
    worker_services.worker_remove(actor=actor(request), worker=worker)
    return done(request, f"Worker {worker.name} removed.", "/platform/workers/")
