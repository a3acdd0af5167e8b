"""Tenant access management in the console: members and role bindings (the IAM editor),
service accounts, custom roles and API keys.

Each POST calls the service the REST API calls (``tenants.services.iam`` / ``keys``);
the ``tenant_page`` decorator is the access check, and each page shows only the forms
the caller's held permissions allow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from frontend import forms as f
from frontend.actions import (
    DOMAIN_CODE_PREFIX,
    actor,
    attempt,
    blank_form,
    done,
)
from frontend.requests import TenantPageRequest
from frontend.views import _context, tenant_page
from tenants import selectors as tenant_selectors
from tenants.models import Principal, PrincipalKind, Tenant
from tenants.permissions import TENANT_PERMISSIONS
from tenants.services import iam


def _role_names(tenant: Tenant) -> list[str]:
    return list(
        tenant_selectors.role_list(tenant=tenant).order_by("name").values_list("name", flat=True)
    )


def _accounts(tenant: Tenant) -> list[tuple[str, str]]:
    return [
        (str(p.pk), p.username)
        for p in tenant_selectors.service_account_list(tenant=tenant).order_by("username")
    ]


def _editor_rows(policy: iam.Policy) -> list[dict[str, Any]]:
    return [
        {
            "role": b.role.name,
            "principal": str(b.principal_id),
            "principal_name": b.principal.username,
            "kind": b.principal.kind,
            "expires_at": b.expires_at,
        }
        for b in policy.bindings
    ]


def _access_page(request: TenantPageRequest, *, status: int = 200, **bound: Any) -> HttpResponse:
    tenant = request.tenant
    held = request.held
    policy = iam.policy_get(tenant=tenant)
    roles = _role_names(tenant)
    context = _context(
        request,
        tenant=tenant,
        held=held,
        policy=policy,
        rows=bound.pop("rows", None) or _editor_rows(policy),
        etag=bound.pop("etag", None) or policy.etag,
        conflict=bound.pop("conflict", None),
        current_rows=_editor_rows(policy),
        roles=roles,
        role_objects=tenant_selectors.role_list(tenant=tenant).order_by("name"),
        accounts=tenant_selectors.service_account_list(tenant=tenant).order_by("username"),
        member_form=bound.pop("member_form", None) or MemberAdd(roles=roles),
        account_form=bound.pop("account_form", None) or f.ServiceAccountForm(),
        role_form=bound.pop("role_form", None)
        or f.RoleCreateForm(permissions=sorted(TENANT_PERMISSIONS)),
        editor_errors=bound.pop("editor_errors", []),
        **bound,
    )
    response = render(request, "frontend/access.html", context)
    response.status_code = status
    return response


class MemberAdd(f.MemberAddForm):
    pass


@tenant_page("iam.get")
def access_page(request: TenantPageRequest) -> HttpResponse:
    """Members and bindings, service accounts and roles of the tenant."""
    return _access_page(request)


def _principal_by_name(tenant: Tenant, username: str) -> Principal | None:
    """A human (platform identity) or one of this tenant's service accounts, by name.

    Another tenant's service account is reported exactly like a missing name.
    """
    principal = Principal.objects.filter(username=username, is_active=True).first()
    if principal is None:
        return None
    if principal.kind == PrincipalKind.SERVICE and principal.tenant_id != tenant.pk:
        return None
    return principal


def _parse_expiry(raw: str) -> datetime | None:
    if not raw:
        return None
    field = forms.DateTimeField(input_formats=f.DATETIME_FORMATS)
    cleaned: datetime | None = field.clean(raw)  # the stubs type Field.clean as Any
    return cleaned


@tenant_page("iam.set")
@require_POST
def policy_save(request: TenantPageRequest) -> HttpResponse:
    """The IAM editor: replace the policy under the etag the editor was loaded with.

    A stale etag (someone saved in between) re-shows the editor with the caller's rows,
    the current policy beside them and the current etag, so saving again is an explicit
    decision to overwrite; reloading discards the caller's version.
    """
    tenant = request.tenant
    count = min(int(request.POST.get("rows", "0") or 0), 1000)
    rows, specs, errors = [], [], []
    for i in range(count):
        role = request.POST.get(f"b-{i}-role", "")
        principal = request.POST.get(f"b-{i}-principal", "")
        raw_expiry = request.POST.get(f"b-{i}-expires_at", "")
        name = request.POST.get(f"b-{i}-principal_name", "")
        try:
            expires = _parse_expiry(raw_expiry)
        except forms.ValidationError:
            errors.append(f"Row {i + 1} ({name}): the expiry is not a date and time.")
            expires = None
        row: dict[str, Any] = {
            "role": role,
            "principal": principal,
            "principal_name": name,
            "expires_at": expires,
        }
        rows.append(row)
        if request.POST.get(f"b-{i}-remove"):
            row["removed"] = True
            continue
        specs.append(iam.BindingSpec(role=role, principal_id=principal, expires_at=expires))
    if errors:
        return _access_page(request, status=400, rows=rows, editor_errors=errors)
    form = blank_form()
    policy = attempt(
        form,
        lambda: iam.policy_set(
            actor=actor(request),
            tenant=tenant,
            etag=request.POST.get("etag", ""),
            bindings=specs,
        ),
    )
    if policy is None:
        refused = form.non_field_errors().as_data()
        message = str(refused[0].message) if refused else "Not saved."
        conflict = bool(refused) and refused[0].code == f"{DOMAIN_CODE_PREFIX}etag_mismatch"
        return _access_page(
            request,
            status=409 if conflict else 400,
            rows=rows,
            conflict=conflict,
            editor_errors=[] if conflict else [message],
            etag=iam.policy_get(tenant=tenant).etag if conflict else request.POST.get("etag"),
        )
    return done(request, f"Policy saved ({len(specs)} bindings).", f"/t/{tenant.slug}/access/")


@tenant_page("iam.set")
@require_POST
def member_add(request: TenantPageRequest) -> HttpResponse:
    """Bind a principal (by name) to a role: read the policy, append, replace under its etag."""
    tenant = request.tenant
    form = MemberAdd(request.POST, roles=_role_names(tenant))
    if form.is_valid():
        principal = _principal_by_name(tenant, form.cleaned_data["principal"])
        if principal is None:
            form.add_error("principal", "No such person or service account (unknown_principal).")
        else:
            policy = iam.policy_get(tenant=tenant)
            specs = [
                iam.BindingSpec(
                    role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at
                )
                for b in policy.bindings
            ]
            specs.append(
                iam.BindingSpec(
                    role=form.cleaned_data["role"],
                    principal_id=str(principal.pk),
                    expires_at=form.cleaned_data.get("expires_at"),
                )
            )
            saved = attempt(
                form,
                lambda: iam.policy_set(
                    actor=actor(request), tenant=tenant, etag=policy.etag, bindings=specs
                ),
            )
            if saved is not None:
                return done(
                    request,
                    f"{principal.username} is now {form.cleaned_data['role']}.",
                    f"/t/{tenant.slug}/access/",
                )
    return _access_page(request, status=400, member_form=form)


@tenant_page("iam.set")
@require_POST
def service_account_create(request: TenantPageRequest) -> HttpResponse:
    tenant = request.tenant
    form = f.ServiceAccountForm(request.POST)
    if form.is_valid():
        account = attempt(
            form,
            lambda: iam.service_account_create(
                actor=actor(request),
                tenant=tenant,
                name=form.cleaned_data["name"],
                description=form.cleaned_data.get("description", ""),
            ),
        )
        if account is not None:
            return done(
                request,
                f"Service account {account.username} created. Add it as a member to give "
                "it a role, then create its API key.",
                f"/t/{tenant.slug}/access/",
            )
    return _access_page(request, status=400, account_form=form)


@tenant_page("iam.set")
@require_POST
def role_create(request: TenantPageRequest) -> HttpResponse:
    tenant = request.tenant
    form = f.RoleCreateForm(request.POST, permissions=sorted(TENANT_PERMISSIONS))
    if form.is_valid():
        role = attempt(
            form,
            lambda: iam.role_create(
                actor=actor(request),
                tenant=tenant,
                name=form.cleaned_data["name"],
                title=form.cleaned_data["title"],
                permissions=list(form.cleaned_data["permissions"]),
                description=form.cleaned_data.get("description", ""),
            ),
        )
        if role is not None:
            return done(request, f"Role {role.name} created.", f"/t/{tenant.slug}/access/")
    return _access_page(request, status=400, role_form=form)
