"""Platform console pages for people: invitations (send, list, revoke) and a person's
sessions (list, sign out one, sign out everywhere).

POSTs call ``identity.services.invitations`` / ``.sessions`` / ``.people`` (the services
the REST API calls) with the request's actor; ``platform_page`` is the access check.
"""

from __future__ import annotations

from django import forms
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from frontend.actions import actor, attempt, done, uuid_or_404
from frontend.requests import PlatformPageRequest
from frontend.views import _context, platform_page
from frontend.views_platform import _held
from identity.services import invitations, sessions
from tenants.models import Principal, PrincipalKind, Tenant
from tenants.permissions import PREDEFINED_ROLES

#: Role rows on the invitation form (each optional).
ROLE_ROWS = 3

_TENANT_ROLES = [("", "(no role)")] + [
    (r.name, f"{r.name} ({r.title})") for r in PREDEFINED_ROLES if r.scope == "tenant"
]


class InvitationForm(forms.Form):
    username = forms.RegexField(
        regex=r"^[A-Za-z0-9@.+_-]{3,150}$",
        max_length=150,
        label="Username",
        help_text="3-150 letters, digits and @.+_-",
    )
    email = forms.EmailField(label="Email", help_text="The link goes to this address.")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        for row in range(1, ROLE_ROWS + 1):
            self.fields[f"tenant_{row}"] = forms.ModelChoiceField(
                queryset=Tenant.objects.order_by("slug"),
                to_field_name="slug",
                required=False,
                label=f"Tenant {row} (optional)",
            )
            self.fields[f"role_{row}"] = forms.ChoiceField(
                choices=_TENANT_ROLES, required=False, label=f"Role {row} (optional)"
            )

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        for row in range(1, ROLE_ROWS + 1):
            if bool(data.get(f"tenant_{row}")) != bool(data.get(f"role_{row}")):
                self.add_error(f"role_{row}", "Pick both a tenant and a role, or neither.")
        return data

    def roles(self) -> list[tuple[str, str]]:
        rows = (
            (self.cleaned_data.get(f"tenant_{r}"), self.cleaned_data.get(f"role_{r}"))
            for r in range(1, ROLE_ROWS + 1)
        )
        return [(tenant.slug, str(role)) for tenant, role in rows if tenant and role]


def _invitations_page(
    request: PlatformPageRequest, *, status: int = 200, form: InvitationForm | None = None
) -> HttpResponse:
    response = render(
        request,
        "frontend/platform_invitations.html",
        _context(
            request,
            held=_held(request),
            pending=list(invitations.invitation_list_pending()[:500]),
            now=timezone.now(),
            invite_form=form or InvitationForm(),
        ),
    )
    response.status_code = status
    return response


@platform_page("tenants.list")
def invitations_page(request: PlatformPageRequest) -> HttpResponse:
    return _invitations_page(request)


@require_POST
@platform_page("tenants.manage")
def invitation_create(request: PlatformPageRequest) -> HttpResponse:
    form = InvitationForm(request.POST)
    if form.is_valid():
        invitation = attempt(
            form,
            lambda: invitations.invitation_create(
                actor=actor(request),
                username=form.cleaned_data["username"],
                email=form.cleaned_data["email"],
                roles=form.roles(),
                set_password_url=request.build_absolute_uri("/reset/") + "{uid}/{token}/",
            ),
        )
        if invitation is not None:
            response: HttpResponse = done(
                request,
                f"Invitation sent to {invitation.email}; the link works once and expires.",
                "/platform/invitations/",
            )
            return response
    return _invitations_page(request, status=400, form=form)


@require_POST
@platform_page("tenants.manage")
def invitation_revoke(request: PlatformPageRequest, invitation_id: str) -> HttpResponse:
    invitations.invitation_revoke(actor=actor(request), invitation_id=uuid_or_404(invitation_id))
    response: HttpResponse = done(
        request, "Invitation revoked: its link no longer works.", "/platform/invitations/"
    )
    return response


def _person(principal_id: str) -> Principal:
    person = Principal.objects.filter(
        pk=uuid_or_404(principal_id), kind=PrincipalKind.HUMAN
    ).first()
    if person is None:
        raise Http404("No such person.")
    return person


@platform_page("tenants.list")
def person_sessions_page(request: PlatformPageRequest, principal_id: str) -> HttpResponse:
    person = _person(principal_id)
    return render(
        request,
        "frontend/platform_sessions.html",
        _context(
            request,
            held=_held(request),
            person=person,
            sessions=sessions.person_session_list(
                principal=person, current_key=request.session.session_key
            ),
        ),
    )


@require_POST
@platform_page("tenants.manage")
def person_session_end(
    request: PlatformPageRequest, principal_id: str, session_id: str
) -> HttpResponse:
    person = _person(principal_id)
    sessions.person_session_end(actor=actor(request), principal=person, session=session_id)
    response: HttpResponse = done(
        request, "That session is signed out.", f"/platform/people/{person.pk}/sessions/"
    )
    return response
