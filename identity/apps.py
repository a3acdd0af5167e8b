from __future__ import annotations

from django.apps import AppConfig


class IdentityConfig(AppConfig):
    """Single sign-on (OpenID Connect) and the IdP group → role binding mapping."""

    name = "identity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the user_logged_in receiver that records a session's facts.
        from identity.services import sessions  # noqa: F401
