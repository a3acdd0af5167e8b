"""Password change, reset and invitation acceptance: Django's own views, audited.

Each step writes one audit row (``identity.principal.password_change``,
``.password_reset_request``, ``.password_reset`` with ``succeeded`` or denied
``invalid_token``). All are off when ``CACHEPLANE_PASSWORD_LOGIN`` is false.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase

from audit.services import audit_record
from audit.services.denials import audit_denial
from tenants.actor import Actor

FORM = "frontend/account_form.html"
MESSAGE = "frontend/account_message.html"


class _PasswordsOn:
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.CACHEPLANE_PASSWORD_LOGIN:
            raise Http404("Password sign-in is off.")
        response: HttpResponseBase = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        return response


def _record(request: HttpRequest, action: str, target_id: str, **details: Any) -> None:
    with transaction.atomic():
        audit_record(
            actor=Actor.from_request(request),
            action=action,
            tenant=None,
            target_type="principal",
            target_id=target_id,
            details=details,
        )


class PasswordChange(_PasswordsOn, auth_views.PasswordChangeView):
    template_name = FORM
    success_url = "/account/password/done/"
    extra_context = {"title": "Change your password"}

    def form_valid(self, form: Any) -> HttpResponse:
        response: HttpResponse = super().form_valid(form)
        _record(self.request, "identity.principal.password_change", str(self.request.user.pk))
        return response


class PasswordChangeDone(_PasswordsOn, auth_views.PasswordChangeDoneView):
    template_name = MESSAGE
    extra_context = {"title": "Password changed", "message": "Your password is changed."}


class PasswordReset(_PasswordsOn, auth_views.PasswordResetView):
    template_name = FORM
    email_template_name = "frontend/password_reset_email.txt"
    success_url = "/password-reset/done/"
    extra_context = {"title": "Reset your password"}

    def form_valid(self, form: Any) -> HttpResponse:
        response: HttpResponse = super().form_valid(form)
        # Whether the address is known is not revealed to the requester, only recorded.
        _record(
            self.request,
            "identity.principal.password_reset_request",
            "",
            email=form.cleaned_data["email"][:254],
        )
        return response


class PasswordResetDone(_PasswordsOn, auth_views.PasswordResetDoneView):
    template_name = MESSAGE
    extra_context = {
        "title": "Check your mail",
        "message": "If the address belongs to an account, a link to reset its password is on "
        "its way. The link works once and expires.",
    }


class PasswordResetConfirm(_PasswordsOn, auth_views.PasswordResetConfirmView):
    """Also the invitation link: an invited person chooses a first password here."""

    template_name = FORM
    success_url = "/reset/done/"
    extra_context = {"title": "Choose a password"}

    def dispatch(self, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = super().dispatch(*args, **kwargs)
        if not getattr(self, "validlink", False):
            user = getattr(self, "user", None)
            audit_denial(
                actor=Actor.from_request(self.request),
                action="identity.principal.password_reset",
                tenant=None,
                target_type="principal",
                target_id=str(user.pk) if user is not None else "",
                details={"reason": "invalid_token"},
            )
        return response

    def form_valid(self, form: Any) -> HttpResponse:
        from identity.services.invitations import invitation_accepted

        response: HttpResponse = super().form_valid(form)
        _record(self.request, "identity.principal.password_reset", str(form.user.pk))
        invitation_accepted(actor=Actor.from_request(self.request), principal=form.user)
        return response


class PasswordResetComplete(_PasswordsOn, auth_views.PasswordResetCompleteView):
    template_name = MESSAGE
    extra_context = {
        "title": "Password set",
        "message": "Your password is set: sign in with it.",
    }
