"""Django authentication backends for the console: local passwords (switchable) and SSO."""

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
