"""Console pages: thin adapters over selectors, guarded by the access boundary.

A tenant page for a tenant the principal holds no binding on is a 404 (as in the API);
a page whose permission it lacks is a 403 with a readable message. Denials are audited.
Pages render a first snapshot server-side; ``static/frontend/console.js`` then keeps
them live over the WebSocket and re-fetches over REST on every (re)connect.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme

from caches import selectors as cache_selectors
from controlplane.task_health import background_jobs_overdue
from frontend import selectors
from frontend.requests import ConsoleRequest, PlatformPageRequest, TenantPageRequest
from tenants.access import PermissionMissing, access_platform, access_tenant
from tenants.actor import Actor
from tenants.errors import TenantNotFound, TenantSuspended
from tenants.selectors import tenant_list_visible
from tenants.services.authorization import authorize

#: Session key of a form posted while the session had expired (see :func:`login_required`).
RESUME_SESSION_KEY = "console.resume"
#: Posted fields never parked in the session: the CSRF token, passwords, secrets.
_NOT_KEPT = ("csrfmiddlewaretoken", "password", "secret")


def _referring_page(request: HttpRequest) -> str | None:
    """The same-origin page a form was posted from (its path and query), else None."""
    from urllib.parse import urlsplit

    referer = request.headers.get("referer", "")
    if not referer or not url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return None
    parts = urlsplit(referer)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def login_required(view: View) -> View:
    """Django's ``login_required``, except that a form posted after the session expired
    is not lost: its fields (no token, no password) wait in the session, the login
    returns to the page the form is on (not the POST-only action, which would answer an
    empty 405), and that page fills the form in again for the user to submit again.
    Nothing is submitted on the user's behalf."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if request.method != "POST":
            return redirect_to_login(request.get_full_path())
        page = _referring_page(request) or "/"
        request.session[RESUME_SESSION_KEY] = {
            "page": page,
            "action": request.path,
            "data": {
                name: request.POST.getlist(name)
                for name in request.POST
                if not any(word in name.lower() for word in _NOT_KEPT)
            },
        }
        return redirect_to_login(page)

    return wrapper


def _resume(request: HttpRequest) -> dict[str, Any] | None:
    """The form waiting to be resumed on this page (taken once), if any."""
    if request.method != "GET":
        return None
    pending = request.session.get(RESUME_SESSION_KEY)
    if not pending or pending.get("page") != request.get_full_path():
        return None
    return cast(dict[str, Any], request.session.pop(RESUME_SESSION_KEY))


def _forbidden(request: HttpRequest, message: str) -> HttpResponse:
    return render(request, "frontend/forbidden.html", {"message": message}, status=403)


#: A console view: the request, the URL's keyword arguments, the response.
View = Callable[..., HttpResponse]


def tenant_page(permission: str) -> Callable[[View], View]:
    """Resolve ``<tenant>`` from the URL and require ``permission`` there ("member": any).

    The decision and its audit are ``tenants.access.access_tenant``'s (the same rules as
    the API): missing or forbidden → 404, suspended → 403 page, lacking the permission
    → 403 page. Sets ``request.tenant`` and ``request.held``.
    """

    def decorate(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, tenant: str, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                grant = access_tenant(
                    actor=Actor.from_request(request),
                    tenant_ref=tenant,
                    permission=permission,
                    action="frontend.page.view",
                    target_type="page",
                    target_id=request.path[:200],
                )
            except TenantNotFound:
                raise Http404("No such tenant.") from None
            except TenantSuspended:
                return _forbidden(request, "This tenant is suspended.")
            except PermissionMissing:
                return _forbidden(request, f"You need the permission “{permission}” here.")
            if grant.tenant is None:  # access_tenant admits into a tenant, never platform scope
                raise Http404("No such tenant.")
            # The one place these attributes are set (see frontend.requests).
            page = cast(TenantPageRequest, request)
            page.tenant = grant.tenant
            page.held = grant.permissions
            return view(page, *args, **kwargs)

        return wrapper

    return decorate


def platform_page(permission: str) -> Callable[[View], View]:
    """Require the platform ``permission`` (decided and audited by ``access_platform``)."""

    def decorate(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                grant = access_platform(
                    actor=Actor.from_request(request),
                    permission=permission,
                    action="frontend.page.view",
                    target_type="page",
                    target_id=request.path[:200],
                )
            except PermissionMissing:
                return _forbidden(request, f"You need the platform permission “{permission}”.")
            page = cast(PlatformPageRequest, request)
            page.tenant = None
            page.held = grant.permissions
            return view(page, *args, **kwargs)

        return wrapper

    return decorate


def _context(request: ConsoleRequest, **extra: Any) -> dict[str, Any]:
    visible = list(tenant_list_visible(principal=request.user).order_by("slug")[:100])
    platform = authorize(principal=request.user, permission="tenants.list", tenant=None)
    # Every tenant page shows the tenant's navigation, which needs the held permissions.
    held = getattr(request, "held", None)
    return {
        "switcher": visible,
        "is_platform": platform,
        "held": held,
        "resume": _resume(request),
        **extra,
    }


@login_required
def home(request: ConsoleRequest) -> HttpResponse:
    """Platform operators land on the overview; tenant members on their first tenant."""
    if authorize(principal=request.user, permission="tenants.list", tenant=None):
        return redirect("console-platform")
    first = tenant_list_visible(principal=request.user).order_by("slug").first()
    if first is not None:
        return redirect("console-tenant", tenant=first.slug)
    return render(request, "frontend/no_access.html", _context(request))


@platform_page("tenants.list")
def platform_overview(request: PlatformPageRequest) -> HttpResponse:
    raw_page = request.GET.get("page", "1")
    page = max(1, int(raw_page)) if raw_page.isdigit() else 1
    summary = selectors.platform_summary(page=page)
    return render(
        request,
        "frontend/platform.html",
        _context(
            request,
            summary=summary,
            top=summary["top"],
            page_data=summary,
            background_alerts=background_jobs_overdue(),
        ),
    )


@tenant_page("member")
def tenant_overview(request: TenantPageRequest) -> HttpResponse:
    summary = selectors.tenant_summary(tenant=request.tenant, principal=request.user)
    return render(
        request,
        "frontend/tenant.html",
        _context(
            request,
            tenant=request.tenant,
            held=request.held,
            summary=summary,
            page_data=summary,
            top_caches=selectors.tenant_top_caches(tenant=request.tenant)
            if "usage.get" in request.held
            else None,
        ),
    )


@tenant_page("caches.get")
def cache_page(
    request: TenantPageRequest, cache_id: UUID, form_errors: dict[str, Any] | None = None
) -> HttpResponse:
    """A cache's page; ``form_errors`` re-shows a refused action's form (``views_manage``)."""
    from frontend import forms

    cache = cache_selectors.cache_get(tenant=request.tenant, cache_id=str(cache_id))
    if cache is None:
        raise Http404("No such cache.")
    detail = selectors.cache_detail(tenant=request.tenant, cache=cache)
    return render(
        request,
        "frontend/cache.html",
        _context(
            request,
            tenant=request.tenant,
            cache=detail,
            page_data=detail,
            live=detail["live"],
            form_errors=form_errors,
            extend_form=forms.CacheExtendForm(),
            ttl_form=forms.CacheSetTtlForm(initial={"ttl_seconds": detail["ttl_seconds"]}),
            policy_form=forms.CachePolicyForm(initial={"ttl_policy": detail["ttl_policy"]}),
            can_update="caches.update" in request.held,
            can_evict="caches.delete" in request.held,
            can_see_usage="usage.get" in request.held,
        ),
    )


@tenant_page("audit.export")
def audit_page(request: TenantPageRequest) -> HttpResponse:
    return render(request, "frontend/audit.html", _context(request, tenant=request.tenant))


@tenant_page("usage.get")
def breakeven_page(request: TenantPageRequest) -> HttpResponse:
    """The calculator opens on a priced model (an unpriced one would only show an error)."""
    from django.utils import timezone

    from billing.services.breakeven import autopilot_savings

    models = selectors.breakeven_models()
    month = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return render(
        request,
        "frontend/breakeven.html",
        _context(
            request,
            tenant=request.tenant,
            autopilot=autopilot_savings(tenant=request.tenant, since=month),
            models=models,
            selected=request.GET.get("model")
            or next((m["key"] for m in models if m["priced"]), ""),
        ),
    )


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page says; answer with the SVG icon."""
    from django.contrib.staticfiles import finders

    path = finders.find("frontend/favicon.svg")
    if not isinstance(path, str):  # shipped with the app; None only in a broken install
        raise Http404("No favicon.")
    with open(path, "rb") as handle:
        response = HttpResponse(handle.read(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response
