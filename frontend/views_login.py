"""Console sign-in: local passwords (break-glass, switchable) and single sign-on.

Adapters only: every credential is resolved by ``tenants.authentication`` (which names
the outcomes and their audit rows); the views render its answers and open the session.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from audit.http import login_lockout_response
from identity.backends import SSO_BACKEND
from identity.services.oidc import SsoRefused, oidc_enabled
from tenants.authentication import (
    oidc_authenticate,
    oidc_login_begin,
    password_authenticate,
    password_login_refused,
)

_NEXT_KEY = "cacheplane.sso.next"

REFUSAL_TITLES = {
    "no_access": "No access",
    "principal_disabled": "Account disabled",
    "username_taken": "Account conflict",
}


class ConsoleAuthenticationForm(AuthenticationForm):
    """Django's login form, its credential checked by ``tenants.authentication``."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            self.user_cache = password_authenticate(
                request=self.request, username=username, password=password
            )
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        cleaned: dict[str, Any] = self.cleaned_data
        return cleaned


class ConsoleLoginView(auth_views.LoginView):
    """Django's LoginView with the SSO button; password posts refused when switched off."""

    template_name = "frontend/login.html"
    authentication_form = ConsoleAuthenticationForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_enabled"] = oidc_enabled()
        context["sso_name"] = settings.CACHEPLANE_OIDC_PROVIDER_NAME
        context["password_login"] = settings.CACHEPLANE_PASSWORD_LOGIN
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refused = password_login_refused(request=request)
        if refused == "password_login_off":
            return render(
                request,
                "frontend/sso_refused.html",
                {
                    "title": "Password sign-in is off",
                    "message": "This deployment signs in through its identity provider only.",
                },
                status=403,
            )
        if refused == "source_locked":
            locked: HttpResponse = login_lockout_response(request)
            return locked
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


@require_GET
def sso_start(request: HttpRequest) -> HttpResponseBase:
    """Redirect to the provider's authorization endpoint (state, nonce, PKCE in session)."""
    if not oidc_enabled():
        return redirect("login")
    nxt = request.GET.get("next", "")
    if nxt and url_has_allowed_host_and_scheme(
        nxt, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        request.session[_NEXT_KEY] = nxt
    try:
        return oidc_login_begin(
            request=request, redirect_uri=request.build_absolute_uri(reverse("sso-callback"))
        )
    except SsoRefused as refused:  # audited by oidc_login_begin
        return _refused_page(request, refused)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Finish the code flow, admit the person (audited) and open a session."""
    if not oidc_enabled():
        return redirect("login")
    try:
        principal = oidc_authenticate(request=request)
    except SsoRefused as refused:  # audited by oidc_authenticate
        return _refused_page(request, refused)
    nxt = request.session.pop(_NEXT_KEY, "") or settings.LOGIN_REDIRECT_URL
    login(request, principal, backend=SSO_BACKEND)
    return redirect(nxt)


def _refused_page(request: HttpRequest, refused: SsoRefused) -> HttpResponse:
    return render(
        request,
        "frontend/sso_refused.html",
        {
            "title": REFUSAL_TITLES.get(refused.reason, "Sign-in failed"),
            "message": refused.message,
            "reason": refused.reason,
        },
        status=403,
    )
