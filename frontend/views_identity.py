"""Platform console page for single sign-on: the IdP group → tenant role mapping.

POSTs call ``identity.services.mappings`` (the same services as the REST API) with the
request's actor; ``platform_page`` is the access check.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.errors import DomainError
from frontend.actions import actor, attempt, done, uuid_or_404
from frontend.requests import PlatformPageRequest
from frontend.views import _context, platform_page
from frontend.views_platform import _held
from identity.services import mappings, people
from tenants.models import Principal, PrincipalKind, Tenant
from tenants.permissions import PREDEFINED_ROLES


class GroupMappingForm(forms.Form):
    group = forms.CharField(max_length=255, label="IdP group", help_text="As the IdP sends it.")
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.order_by("slug"), to_field_name="slug", label="Tenant"
    )
    role = forms.ChoiceField(
        label="Role",
        choices=[
            (r.name, f"{r.name} ({r.title})") for r in PREDEFINED_ROLES if r.scope == "tenant"
        ],
    )


def _page(
    request: PlatformPageRequest, *, status: int = 200, form: GroupMappingForm | None = None
) -> HttpResponse:
    response = render(
        request,
        "frontend/platform_sso.html",
        _context(
            request,
            held=_held(request),
            mappings=list(mappings.group_mapping_list()[:500]),
            mapping_form=form or GroupMappingForm(),
            issuer=settings.CACHEPLANE_OIDC_ISSUER,
            groups_claim=settings.CACHEPLANE_OIDC_GROUPS_CLAIM,
            password_login=settings.CACHEPLANE_PASSWORD_LOGIN,
        ),
    )
    response.status_code = status
    return response


@platform_page("tenants.list")
def sso_page(request: PlatformPageRequest) -> HttpResponse:
    return _page(request)


@require_POST
@platform_page("tenants.manage")
def group_mapping_create(request: PlatformPageRequest) -> HttpResponse:
    form = GroupMappingForm(request.POST)
    if form.is_valid():
        mapping = attempt(
            form,
            lambda: mappings.group_mapping_create(
                actor=actor(request),
                tenant=form.cleaned_data["tenant"],
                group=form.cleaned_data["group"],
                role=form.cleaned_data["role"],
            ),
        )
        if mapping is not None:
            response: HttpResponse = done(
                request,
                f"Members of {mapping.group} now get {mapping.role.name} on {mapping.tenant.slug}"
                " at their next sign-in.",
                "/platform/sso/",
            )
            return response
    return _page(request, status=400, form=form)


@require_POST
@platform_page("tenants.manage")
def group_mapping_delete(request: PlatformPageRequest, mapping_id: str) -> HttpResponse:
    mappings.group_mapping_delete(actor=actor(request), mapping_id=uuid_or_404(mapping_id))
    response: HttpResponse = done(
        request, "Mapping removed; its bindings go at each holder's next sign-in.", "/platform/sso/"
    )
    return response


@require_POST
@platform_page("tenants.manage")
def person_action(request: PlatformPageRequest, principal_id: str, verb: str) -> HttpResponse:
    """Disable, enable, sign out everywhere or remove a person from the people table."""
    person = Principal.objects.filter(
        pk=uuid_or_404(principal_id), kind=PrincipalKind.HUMAN
    ).first()
    if person is None or verb not in PERSON_VERBS:
        raise Http404("No such person.")
    who = actor(request)
    try:
        if verb == "disable":
            people.person_set_active(actor=who, principal=person, active=False)
        elif verb == "enable":
            people.person_set_active(actor=who, principal=person, active=True)
        elif verb == "sign-out":
            people.person_sessions_end(actor=who, principal=person)
        else:
            people.person_remove(actor=who, principal=person)
    except DomainError as error:
        messages.error(request, f"{error.message} ({error.code})")
        return redirect("/platform/tenants/")
    response: HttpResponse = done(request, PERSON_VERBS[verb].format(person), "/platform/tenants/")
    return response


PERSON_VERBS = {
    "disable": "{} is disabled: their sessions and keys stopped.",
    "enable": "{} can sign in again.",
    "sign-out": "{} is signed out everywhere.",
    "remove": "{} is removed: bindings gone, history kept.",
}
