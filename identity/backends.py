"""Django authentication backends for the console: local passwords (switchable) and SSO.

Django's ``authenticate`` and ``login`` call these; the console reaches them through
``tenants.authentication`` (``password_authenticate``, ``oidc_authenticate``), the module
that resolves every credential and names its outcomes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest

from tenants.models import Principal


class PasswordBackend(ModelBackend):
    """Django's username/password check, refused everywhere (console and admin) when
    ``CACHEPLANE_PASSWORD_LOGIN`` is false; sessions it made earlier stay valid until
    they end (``get_user`` is untouched)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Principal | None:
        if not settings.CACHEPLANE_PASSWORD_LOGIN:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if isinstance(user, Principal) else None


class SsoSessionBackend(ModelBackend):
    """Names the sessions opened by single sign-on; authenticates nothing by itself (the
    callback verifies the provider's ID token, then logs the principal in with it)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Principal | None:
        return None


SSO_BACKEND = "identity.backends.SsoSessionBackend"


def axes_username(request: HttpRequest | None, credentials: dict[str, Any] | None) -> str:
    """The user name django-axes records and locks on, cut to its 255-character column.

    Django's login form does not enforce its 150-character limit on what it passes to
    ``authenticate``, so a longer name reached axes' ``AccessAttempt.username`` and the
    insert failed (a 500). No principal's name is longer than 150, so the cut never
    merges two real accounts.
    """
    username = (credentials or {}).get("username")
    if username is None and request is not None:
        username = request.POST.get("username", "")
    return str(username or "")[:255]
