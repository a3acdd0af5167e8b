"""Tenants' hosted-provider keys in the console: list, add, rotate, remove, and the cache
autopilot switch.

Each POST calls the service the REST API calls (``gateway.provider_credentials``) with
the request's actor, so the key's rules, the error codes and the audit rows
(``gateway.provider_credential.set`` / ``.rotate`` / ``.update`` / ``.delete``, the key
redacted) are those of ``/api/v1/tenants/{tenant}/provider-credentials``. Access is the
one boundary's (``tenant_page``): reading needs ``provider_credentials.get``, writing
``provider_credentials.set``, as in the API. A key is accepted and never shown again:
the page shows its fingerprint only.
"""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from frontend.actions import actor, attempt, blank_form, done, invalid
from frontend.forms_provider_credentials import (
    ProviderCredentialAddForm,
    ProviderCredentialAutopilotForm,
    ProviderCredentialRotateForm,
)
from frontend.requests import TenantPageRequest
from frontend.views import _context, tenant_page
from gateway import provider_credentials as services
from gateway.models import HostedProvider, ProviderCredential

_LABELS = dict(HostedProvider.choices)


def _credentials(request: TenantPageRequest) -> list[ProviderCredential]:
    # At most one row per provider (a unique constraint), so three rows at most.
    return list(
        services.provider_credential_list(tenant=request.tenant).select_related("created_by")
    )


def _credential(request: TenantPageRequest, provider: str) -> ProviderCredential:
    """The tenant's key for ``provider``; a provider that cannot exist never reaches SQL."""
    found = (
        services.provider_credential_get(tenant=request.tenant, provider=provider)
        if provider in HostedProvider.values
        else None
    )
    if found is None:
        raise Http404("No key set for this provider.")
    return found


def _page(
    request: TenantPageRequest,
    *,
    status: int = 200,
    add_form: ProviderCredentialAddForm | None = None,
    rotated: tuple[str, ProviderCredentialRotateForm] | None = None,
    row_errors: list[str] | None = None,
) -> HttpResponse:
    """The page, with a refused form re-shown bound (its errors by their fields)."""
    credentials = _credentials(request)
    rows = []
    for credential in credentials:
        if rotated is not None and rotated[0] == credential.provider:
            form = rotated[1]
        else:
            form = ProviderCredentialRotateForm(provider=credential.provider)
        rows.append(
            {
                "credential": credential,
                "label": _LABELS.get(credential.provider, credential.provider),
                "rotate_form": form,
            }
        )
    unset = [p for p in HostedProvider.values if p not in {c.provider for c in credentials}]
    context = _context(
        request,
        tenant=request.tenant,
        rows=rows,
        add_form=add_form or (ProviderCredentialAddForm(providers=unset) if unset else None),
        row_errors=row_errors,
    )
    response = render(request, "frontend/provider_credentials.html", context)
    response.status_code = status
    return response


def _back(request: TenantPageRequest, message: str) -> HttpResponse:
    return done(request, message, f"/t/{request.tenant.slug}/provider-credentials/")


@tenant_page("provider_credentials.get")
def provider_credentials_page(request: TenantPageRequest) -> HttpResponse:
    """The tenant's provider keys (provider, fingerprint, autopilot, added, rotated),
    never the keys; the forms only for a holder of ``provider_credentials.set``."""
    return _page(request)


@tenant_page("provider_credentials.set")
@require_POST
def provider_credential_add(request: TenantPageRequest) -> HttpResponse:
    """Store the key of a provider that has none yet; errors by their field, a 400."""
    tenant = request.tenant
    form = ProviderCredentialAddForm(request.POST, providers=list(HostedProvider.values))
    if form.is_valid():
        provider = form.cleaned_data["provider"]
        # The service's set replaces an existing key (a rotation, as the API's PUT); "add"
        # must not: ``replace=False`` refuses an existing key under the row lock, its
        # error under the Provider field.
        saved = attempt(
            form,
            lambda: services.provider_credential_set(
                tenant=tenant,
                actor=actor(request),
                provider=provider,
                secret=form.cleaned_data["api_key"],
                cache_autopilot=form.cleaned_data["cache_autopilot"],
                replace=False,
            ),
        )
        if saved is not None:
            return _back(
                request, f"{_LABELS[provider]} key added (fingerprint {saved.fingerprint})."
            )
    return invalid(_page(request, add_form=form))


@tenant_page("provider_credentials.set")
@require_POST
def provider_credential_rotate(request: TenantPageRequest, provider: str) -> HttpResponse:
    """Replace the provider's key with a new one (audited ``.rotate``)."""
    credential = _credential(request, provider)
    form = ProviderCredentialRotateForm(request.POST, provider=credential.provider)
    if form.is_valid():
        saved = attempt(
            form,
            lambda: services.provider_credential_set(
                tenant=request.tenant,
                actor=actor(request),
                provider=credential.provider,
                secret=form.cleaned_data["api_key"],
            ),
        )
        if saved is not None:
            return _back(
                request,
                f"{_LABELS[credential.provider]} key rotated (fingerprint {saved.fingerprint}).",
            )
    return invalid(_page(request, rotated=(credential.provider, form)))


@tenant_page("provider_credentials.set")
@require_POST
def provider_credential_autopilot(request: TenantPageRequest, provider: str) -> HttpResponse:
    """Switch the cache autopilot for this tenant and provider (audited ``.update``)."""
    credential = _credential(request, provider)
    form = ProviderCredentialAutopilotForm(request.POST)
    if not form.is_valid():
        return invalid(_page(request, row_errors=["Choose whether the autopilot is on or off."]))
    errors = blank_form()
    saved = attempt(
        errors,
        lambda: services.provider_credential_update(
            credential=credential, actor=actor(request), cache_autopilot=form.enabled()
        ),
    )
    if saved is None:
        return invalid(_page(request, row_errors=[str(e) for e in errors.non_field_errors()]))
    state = "on" if saved.cache_autopilot else "off"
    return _back(request, f"Cache autopilot for {_LABELS[credential.provider]} turned {state}.")


@tenant_page("provider_credentials.set")
@require_POST
def provider_credential_remove(request: TenantPageRequest, provider: str) -> HttpResponse:
    """Remove the provider's key: the tenant's requests to that provider then get 400."""
    credential = _credential(request, provider)
    form = blank_form()
    attempt(
        form,
        lambda: services.provider_credential_delete(credential=credential, actor=actor(request)),
    )
    if form.errors:
        return invalid(_page(request, row_errors=[str(e) for e in form.non_field_errors()]))
    return _back(request, f"{_LABELS[credential.provider]} key removed.")
