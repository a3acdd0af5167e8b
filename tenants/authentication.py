"""Authentication: the one place that turns a presented credential into a principal.

Authorization has one boundary (``tenants.access``); so does authentication. Every entry
point hands what it received to this module and acts on the answer:

* **Where a request comes from** (``client_address``, ``http_source``, ``scope_source``):
  the peer address, or, when the peer is a trusted proxy (``CACHEPLANE_TRUSTED_PROXIES``,
  CIDRs, default none), the right-most ``X-Forwarded-For`` entry that is not itself a
  trusted proxy. Entries to its left were written by the client and are never believed.
  Throttling and audit rows use this address.
* **API keys** (``api_key_authenticate_at``): REST (``controlplane.api.authentication``),
  the WebSocket consumers (``frontend.consumers``) and the gateway (``gateway.identity``)
  all call it: the per-source guess throttle, the lookup, and one failure audit row,
  ``tenants.api_key.authenticate`` (failed; ``details.entry_point`` says which door), on
  the key's tenant chain when the key is real, else on the platform chain.
* **Sessions**: Django's session framework resolves them (console, REST's session
  authentication, Channels' ``AuthMiddlewareStack``); sessions are opened by a password
  (``identity.backends.PasswordBackend``) or by single sign-on (``identity.services.oidc``).

The gateway calls ``api_key_authenticate_at`` only on a key-cache miss (once per key per
``KEY_CACHE_SECONDS``): nothing here adds a round trip to its hot path.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.conf import settings

from tenants.errors import ApiKeyRejected
from tenants.services.keys import AuthenticatedKey

if TYPE_CHECKING:
    from django.http import HttpRequest

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class RequestSource:
    """Where a request came from: the client address (proxies resolved) and user agent."""

    ip: str | None
    user_agent: str = ""


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[_Network, ...]:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry)


def _trusted(address: str, networks: tuple[_Network, ...]) -> bool:
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return any(parsed in network for network in networks)


def client_address(*, peer: str | None, forwarded_for: str | None) -> str | None:
    """The client's address given the peer and its ``X-Forwarded-For`` header (see module)."""
    networks = _networks(tuple(settings.CACHEPLANE_TRUSTED_PROXIES))
    if not peer or not networks or not _trusted(peer, networks):
        return peer or None
    hops = [hop.strip() for hop in (forwarded_for or "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, networks):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a malformed hop: the proxy's own address is all we know
    return hops[0] if hops else peer


def http_source(request: HttpRequest) -> RequestSource:
    """The source of a Django request."""
    return RequestSource(
        ip=client_address(
            peer=request.META.get("REMOTE_ADDR"),
            forwarded_for=request.META.get("HTTP_X_FORWARDED_FOR"),
        ),
        user_agent=request.headers.get("User-Agent", "")[:300],
    )


def scope_source(scope: Mapping[str, Any]) -> RequestSource:
    """The source of an ASGI connection (a Channels scope, a Starlette request's scope)."""
    client = scope.get("client") or (None, None)
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    forwarded, agent = None, ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"x-forwarded-for":
            forwarded = value.decode("latin-1")
        elif lowered == b"user-agent":
            agent = value.decode("latin-1")[:300]
    return RequestSource(
        ip=client_address(peer=client[0], forwarded_for=forwarded), user_agent=agent
    )


def api_key_authenticate_at(
    *, token: str, source: RequestSource, entry_point: str, throttled: bool = True
) -> AuthenticatedKey:
    """Authenticate a presented bearer key for ``entry_point`` (``api``, ``socket``,
    ``gateway``), behind the source's guess throttle unless ``throttled`` is False (a
    re-check of a key already admitted on this connection).

    Raises TooManyFailures (the source is locked out) or ApiKeyRejected (stable code),
    after writing the one failure row (see the module).
    """
    from tenants.services.keys import api_key_authenticate
    from tenants.services.throttling import api_key_authenticate_throttled

    try:
        if not throttled:
            # A re-check reads the database, never the key cache (see api_key_authenticate).
            return api_key_authenticate(token, fresh=True)
        return api_key_authenticate_throttled(
            token=token, source_ip=source.ip, user_agent=source.user_agent
        )
    except ApiKeyRejected as rejected:
        if throttled:
            api_key_failure_record(
                rejected=rejected, token=token, source=source, entry_point=entry_point
            )
        raise


def api_key_failure_record(
    *, rejected: ApiKeyRejected, token: str, source: RequestSource, entry_point: str
) -> None:
    """``tenants.api_key.authenticate`` (failed): the key's tenant chain when it is a real
    key, else the platform chain. Only the non-secret display prefix of what was presented
    is kept, never the key."""
    from audit.models import Outcome
    from audit.services import audit_record
    from tenants.actor import Actor, AuthMethod
    from tenants.models import Tenant

    tenant = Tenant.objects.filter(pk=rejected.tenant_id).first() if rejected.tenant_id else None
    audit_record(
        actor=Actor(
            principal=None,
            auth_method=AuthMethod.API_KEY,
            key_id=rejected.key_id,
            source_ip=source.ip,
            user_agent=source.user_agent,
        ),
        action="tenants.api_key.authenticate",
        tenant=tenant,
        outcome=Outcome.FAILED,
        target_type="api_key",
        target_id=rejected.key_id or "",
        details={
            "reason": rejected.code,
            "presented_prefix": token[:12],
            "entry_point": entry_point,
        },
    )
