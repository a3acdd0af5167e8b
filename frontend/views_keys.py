"""API keys in the console: the keys page (spend, budgets, limits, last use, models),
create, regenerate and revoke.

A new or regenerated key's secret is shown once as POST-redirect-GET: the POST parks it in
the session and redirects; the keys page shows it on the first GET and forgets it, so a
reload shows nothing secret and creates nothing.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from frontend import forms as f
from frontend.actions import actor, attempt, blank_form, done, invalid, no_store, uuid_or_404
from frontend.requests import TenantPageRequest
from frontend.selectors.keys import key_rows
from frontend.views import _context, tenant_page
from frontend.views_access import _accounts
from tenants import selectors as tenant_selectors
from tenants.models import Principal, Tenant
from tenants.services import key_rotation, keys
from tenants.services.authorization import principal_permissions


def _keys_page(request: TenantPageRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    tenant = request.tenant
    context = _context(
        request,
        tenant=tenant,
        held=request.held,
        rows=key_rows(tenant=tenant, now=timezone.now()),
        key_form=extra.pop("key_form", None) or f.ApiKeyCreateForm(accounts=_accounts(tenant)),
        now=timezone.now(),
        **extra,
    )
    response = render(request, "frontend/keys.html", context)
    response.status_code = status
    return response


#: Session key of a secret waiting to be shown once (POST-redirect-GET of a new key).
REVEAL_SESSION_KEY = "console.key_reveal"


def reveal_store(request: TenantPageRequest, *, issued: keys.IssuedKey) -> HttpResponse:
    """Park a new key's secret in the session and redirect to the keys page, which shows
    it once and forgets it: a reload of that page shows nothing secret and creates nothing."""
    tenant = request.tenant
    request.session[REVEAL_SESSION_KEY] = {
        "tenant": str(tenant.pk),
        "key": str(issued.key.pk),
        "name": issued.key.name,
        "plaintext": issued.plaintext,
    }
    return redirect(f"/t/{tenant.slug}/keys/?revealed={issued.key.pk}")


@tenant_page("iam.get")
def keys_page(request: TenantPageRequest) -> HttpResponse:
    """API keys of the tenant (never their secrets), with create and revoke; a secret
    parked by :func:`reveal_store` is shown on the first GET only (no-store)."""
    reveal = request.session.pop(REVEAL_SESSION_KEY, None)
    if reveal is None or reveal.get("tenant") != str(request.tenant.pk):
        return _keys_page(request, reveal_gone="revealed" in request.GET)
    return no_store(_keys_page(request, reveal=reveal))


def _holder_or_error(form: forms.Form, tenant: Tenant) -> tuple[bool, Principal | None]:
    """The chosen service account (None: the caller); False when it cannot hold a key.

    A service account with no role here could authenticate but call nothing (every
    gateway route would answer 404), so the console refuses the key and says why.
    """
    account_id = form.cleaned_data.get("principal")
    if not account_id:
        return True, None
    holder = tenant_selectors.service_account_list(tenant=tenant).filter(pk=account_id).first()
    if holder is None:
        form.add_error("principal", "Choose one of this tenant's service accounts.")
        return False, None
    if not principal_permissions(principal=holder, tenant=tenant):
        form.add_error(
            "principal",
            f"{holder.username} has no role in this tenant, so a key for it could call "
            "nothing. Give it a role on the Access page first.",
        )
        return False, None
    return True, holder


@tenant_page("keys.create")
@require_POST
def key_create(request: TenantPageRequest) -> HttpResponse:
    """Issue a key, then POST-redirect-GET to the keys page that shows its secret once."""
    tenant = request.tenant
    form = f.ApiKeyCreateForm(request.POST, accounts=_accounts(tenant))
    if form.is_valid():
        ok, holder = _holder_or_error(form, tenant)
        issued = (
            attempt(
                form,
                lambda: keys.api_key_create(
                    actor=actor(request),
                    tenant=tenant,
                    name=form.cleaned_data["name"],
                    principal=holder,
                    expires_at=form.cleaned_data.get("expires_at"),
                ),
            )
            if ok
            else None
        )
        if issued is not None:
            return reveal_store(request, issued=issued)
    return invalid(_keys_page(request, key_form=form))


@tenant_page("keys.create")
@require_POST
def key_rotate(request: TenantPageRequest, key_id: str) -> HttpResponse:
    """Regenerate a key (same name, holder, expiry, rate limit); the old one is revoked.
    The new secret is shown once, POST-redirect-GET as for a new key."""
    form = blank_form()
    issued = attempt(
        form,
        lambda: key_rotation.api_key_rotate(
            actor=actor(request), tenant=request.tenant, key_id=uuid_or_404(key_id)
        ),
    )
    if issued is None:
        return invalid(_keys_page(request, revoke_errors=form.non_field_errors()))
    return reveal_store(request, issued=issued)


@tenant_page("keys.revoke")
@require_POST
def key_revoke(request: TenantPageRequest, key_id: str) -> HttpResponse:
    tenant = request.tenant
    form = blank_form()
    key = attempt(
        form,
        lambda: keys.api_key_revoke(
            actor=actor(request), tenant=tenant, key_id=uuid_or_404(key_id)
        ),
    )
    if key is None:
        return invalid(_keys_page(request, revoke_errors=form.non_field_errors()))
    return done(request, f"Key {key.name} revoked.", f"/t/{tenant.slug}/keys/")
