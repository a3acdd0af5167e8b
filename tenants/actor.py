"""Who is acting, and how they proved it: passed to every write service and audit row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.http import HttpRequest

    from tenants.models import Principal


class AuthMethod:
    SESSION = "session"
    API_KEY = "api_key"
    CLI = "cli"
    SYSTEM = "system"
    #: Single sign-on (an OpenID provider vouched for the principal).
    OIDC = "oidc"
    #: The IdP group mapping reconciling a principal's bindings at its login: grants a
    #: platform admin authorized when creating the mapping (see identity.services).
    IDP_MAPPING = "idp_mapping"
    #: The IdP's SCIM client (``key_id`` names the SCIM token it presented).
    SCIM = "scim"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Actor:
    """The principal behind a change plus the request facts the audit log records."""

    principal: Principal | None
    auth_method: str
    key_id: str | None = None
    source_ip: str | None = None
    user_agent: str = ""

    @property
    def principal_id(self) -> str | None:
        return str(self.principal.pk) if self.principal is not None else None

    @property
    def name(self) -> str:
        if self.principal is None:
            return self.auth_method
        return self.principal.username

    @classmethod
    def system(cls, name: str = "system") -> Actor:
        """Cacheplane itself (beat jobs, reconciliation): no principal."""
        return cls(principal=None, auth_method=AuthMethod.SYSTEM, user_agent=name)

    @classmethod
    def cli(cls, principal: Principal | None = None) -> Actor:
        """An operator at the ``cacheplane`` command line."""
        return cls(principal=principal, auth_method=AuthMethod.CLI)

    @classmethod
    def from_request(cls, request: HttpRequest, *, principal: Principal | None = None) -> Actor:
        """Build from an HTTP request; the auth method and key come from authentication."""
        user = principal if principal is not None else getattr(request, "user", None)
        if user is not None and not getattr(user, "is_authenticated", False):
            user = None
        auth = getattr(request, "auth", None)
        key_id = str(auth.pk) if auth is not None and hasattr(auth, "digest") else None
        method = (
            AuthMethod.API_KEY
            if key_id
            else (AuthMethod.SESSION if user is not None else AuthMethod.ANONYMOUS)
        )
        return cls(
            principal=user,
            auth_method=method,
            key_id=key_id,
            source_ip=client_ip(request),
            user_agent=request.headers.get("User-Agent", "")[:300],
        )


def client_ip(request: HttpRequest) -> str | None:
    """The client address: the peer, or what a trusted proxy forwarded
    (``tenants.authentication.client_address``; django-axes calls this too)."""
    from tenants.authentication import http_source

    return http_source(request).ip
