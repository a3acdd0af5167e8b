"""Console sign-in: local passwords (break-glass, switchable) and single sign-on.

Adapters only: the protocol and the decisions are ``identity.services.oidc``'s.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from audit.http import login_lockout_response
from identity.backends import SSO_BACKEND
from identity.services.oidc import (
    SsoRefused,
    oidc_callback_claims,
    oidc_client,
    oidc_enabled,
    sso_login,
    sso_refusal_record,
)
from tenants.actor import client_ip
from tenants.services.failures import login_source_lockout_seconds

_NEXT_KEY = "cacheplane.sso.next"

REFUSAL_TITLES = {
    "no_access": "No access",
    "principal_disabled": "Account disabled",
    "username_taken": "Account conflict",
}


class ConsoleLoginView(auth_views.LoginView):
    """Django's LoginView with the SSO button; password posts refused when switched off."""

    template_name = "frontend/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_enabled"] = oidc_enabled()
        context["sso_name"] = settings.CACHEPLANE_OIDC_PROVIDER_NAME
        context["password_login"] = settings.CACHEPLANE_PASSWORD_LOGIN
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.CACHEPLANE_PASSWORD_LOGIN:
            return render(
                request,
                "frontend/sso_refused.html",
                {
                    "title": "Password sign-in is off",
                    "message": "This deployment signs in through its identity provider only.",
                },
                status=403,
            )
        if login_source_lockout_seconds(source_ip=client_ip(request)):
            locked: HttpResponse = login_lockout_response(request)
            return locked
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


def _facts(request: HttpRequest) -> tuple[str | None, str]:
    return client_ip(request), request.headers.get("User-Agent", "")[:300]


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
        client = oidc_client()
    except SsoRefused as refused:
        source_ip, agent = _facts(request)
        sso_refusal_record(refused=refused, source_ip=source_ip, user_agent=agent)
        return _refused_page(request, refused)
    response: HttpResponseBase = client.authorize_redirect(
        request, request.build_absolute_uri(reverse("sso-callback"))
    )
    return response


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Finish the code flow, admit the person (audited) and open a session."""
    source_ip, agent = _facts(request)
    if not oidc_enabled():
        return redirect("login")
    try:
        try:
            claims = oidc_callback_claims(request=request)
        except SsoRefused as refused:
            sso_refusal_record(refused=refused, source_ip=source_ip, user_agent=agent)
            raise
        admitted = sso_login(claims=claims, source_ip=source_ip, user_agent=agent)
    except SsoRefused as refused:
        return _refused_page(request, refused)
    nxt = request.session.pop(_NEXT_KEY, "") or settings.LOGIN_REDIRECT_URL
    login(request, admitted.principal, backend=SSO_BACKEND)
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
