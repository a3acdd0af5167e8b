"""Authentication: the one place that turns a presented credential into a principal.

Authorization has one boundary (``tenants.access``); so does authentication. Every entry
point hands what it received to a function here and acts on the answer. The protocols
stay with the libraries that implement them (Django's sessions and password hashers,
django-axes, Authlib for OpenID Connect); this module is where they are called from and
where each outcome is named.

Who calls what, and the one audit action each outcome writes:

* API key — ``api_key_authenticate_at`` (REST, WebSocket consumers, gateway).
  Refused: ``tenants.api_key.authenticate`` (failed, written here). Source locked out:
  ``tenants.api_key.lockout`` / ``tenants.api_key.throttled`` (denied,
  ``tenants.services.throttling``). Admitted: no row; the request's own row names the key.
* Password — ``password_login_refused`` then ``password_authenticate`` (console login
  view). Admitted: ``tenants.session.login`` (success). Wrong: ``tenants.session.login``
  (failed, coalesced per source with ``details.failures``). Locked:
  ``tenants.session.lockout`` (denied; ``tenants.services.failures`` when a source's lock
  engages, ``audit.signals`` for django-axes' (user name, source) lock).
* OpenID Connect — ``oidc_login_begin`` (``/login/sso/``) and ``oidc_authenticate`` (its
  callback). Admitted: ``identity.oidc.login`` (success). Refused:
  ``identity.oidc.login`` (denied, ``details.reason``).
* Session — ``session_principal`` (a WebSocket's re-check). Ended: no row here; the
  socket's ``frontend.socket.recheck`` (denied, ``credential_ended``) names it.

``tenants.session.login`` (success) is written for every session opened, by password or
by single sign-on, by Django's ``user_logged_in`` signal (``tenants.signals``); the
password failures go through ``user_login_failed`` to the same receiver module, so the
Django admin's login form, which calls ``django.contrib.auth.authenticate`` itself, is
audited and throttled exactly like the console's.

* **Where a request comes from** (``client_address``, ``http_source``, ``scope_source``):
  the peer address, or, when the peer is a trusted proxy (``CACHEPLANE_TRUSTED_PROXIES``,
  CIDRs, default none), the right-most ``X-Forwarded-For`` entry that is not itself a
  trusted proxy. Entries to its left were written by the client and are never believed.
  Throttling and audit rows use this address.
* **API keys**: the per-source guess throttle, the lookup, and one failure row, on the
  key's tenant chain when the key is real, else on the platform chain
  (``details.entry_point`` says which door). The gateway calls it only on a key-cache
  miss (once per key per ``KEY_CACHE_SECONDS``): nothing here adds a round trip to its
  hot path.
* **Sessions**: Django resolves the cookie on each request (console pages, REST's session
  authentication, Channels' ``AuthMiddlewareStack`` at connect); a long-lived socket
  re-reads its session through ``session_principal``.
* **Passwords**: Django's ``authenticate`` with our backends (django-axes' per-(user name,
  source) lock, ``identity.backends.PasswordBackend``), behind the per-source lock
  (``tenants.services.failures``) and the ``CACHEPLANE_PASSWORD_LOGIN`` switch.
* **OpenID Connect**: ``identity.services.oidc`` (Authlib) verifies the provider's answer
  and applies our rules (issuer, just-in-time provisioning, group mapping, disabled
  people). Imported inside the functions: ``identity`` is built on ``tenants``, not the
  other way round.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings

from tenants.errors import ApiKeyRejected
from tenants.services.keys import AuthenticatedKey

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponseBase

    from tenants.models import Principal

# The audit actions of the outcomes (see the module docstring for who writes each).
API_KEY_AUTHENTICATE = "tenants.api_key.authenticate"
SESSION_LOGIN = "tenants.session.login"
SESSION_LOCKOUT = "tenants.session.lockout"
OIDC_LOGIN = "identity.oidc.login"

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
    """``API_KEY_AUTHENTICATE`` (failed): the key's tenant chain when it is a real
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
        action=API_KEY_AUTHENTICATE,
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


# --- sessions -------------------------------------------------------------------------


def session_principal(*, user_id: UUID | str, session_key: str | None) -> Principal | None:
    """The active principal a stored session names now, re-read from the session store and
    the database; None once the session is gone (logout, sign out everywhere), names
    another user, or no longer matches the principal's password hash, or the principal is
    disabled. ``session_key`` None (a scope built without a session: tests, a trusted
    in-process caller) checks the principal only."""
    from importlib import import_module

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    from tenants.models import Principal

    fresh = Principal.objects.filter(pk=user_id, is_active=True).first()
    if fresh is None or session_key is None:
        return fresh
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # from the session backend, not a copy read earlier
    if str(data.get(SESSION_KEY)) != str(user_id) or BACKEND_SESSION_KEY not in data:
        return None
    stored_hash = data.get(HASH_SESSION_KEY)
    if stored_hash is not None and stored_hash != fresh.get_session_auth_hash():
        return None
    return fresh


# --- passwords ------------------------------------------------------------------------


def password_login_refused(*, request: HttpRequest) -> str | None:
    """Why a password sign-in from ``request`` is refused before any password is checked:
    ``password_login_off`` (``CACHEPLANE_PASSWORD_LOGIN`` is false), ``source_locked``
    (too many failures from this source, any user names), or None. Writes nothing: the
    lock's row was written when it engaged."""
    from tenants.services.failures import login_source_lockout_seconds

    if not settings.CACHEPLANE_PASSWORD_LOGIN:
        return "password_login_off"
    if login_source_lockout_seconds(source_ip=http_source(request).ip):
        return "source_locked"
    return None


def password_authenticate(
    *, request: HttpRequest | None, username: str, password: str
) -> Principal | None:
    """The principal whose user name and password these are, or None.

    Django's ``authenticate`` runs the backends: django-axes' lock per (user name, source)
    (raises PermissionDenied while locked; its middleware answers 429), then
    ``identity.backends.PasswordBackend``. A failure sends ``user_login_failed``, whose
    receiver (``tenants.signals``) counts it toward the source lock and writes the
    coalesced ``SESSION_LOGIN`` (failed) row. ``request`` None (an in-process caller) has
    no source and is neither throttled nor counted (``audit.http.LoginThrottleBackend``).
    """
    from django.contrib.auth import authenticate

    from tenants.models import Principal

    user = authenticate(request, username=username, password=password)
    return user if isinstance(user, Principal) else None


# --- OpenID Connect ---------------------------------------------------------------------


def oidc_login_begin(*, request: HttpRequest, redirect_uri: str) -> HttpResponseBase:
    """The redirect to the provider's authorization endpoint (Authlib keeps ``state``,
    ``nonce`` and the PKCE verifier in the session).

    Raises SsoRefused (``idp_unreachable``, ``issuer_mismatch``) after writing its
    ``OIDC_LOGIN`` (denied) row.
    """
    from identity.services.oidc import SsoRefused, oidc_client, sso_refusal_record

    try:
        client = oidc_client()
    except SsoRefused as refused:
        source = http_source(request)
        sso_refusal_record(refused=refused, source_ip=source.ip, user_agent=source.user_agent)
        raise
    response: HttpResponseBase = client.authorize_redirect(request, redirect_uri)
    return response


def oidc_authenticate(*, request: HttpRequest) -> Principal:
    """The principal the provider's callback ``request`` vouches for: the code exchanged
    and the ID token verified (Authlib), then admitted by our rules
    (``identity.services.oidc.sso_login``: provisioning, group mapping). Writes
    ``OIDC_LOGIN`` (success).

    Raises SsoRefused with its ``reason`` after writing ``OIDC_LOGIN`` (denied).
    """
    from identity.services.oidc import (
        SsoRefused,
        oidc_callback_claims,
        sso_login,
        sso_refusal_record,
    )

    source = http_source(request)
    try:
        claims = oidc_callback_claims(request=request)
    except SsoRefused as refused:
        sso_refusal_record(refused=refused, source_ip=source.ip, user_agent=source.user_agent)
        raise
    # sso_login audits its own refusals, with the facts it learnt from the claims.
    return sso_login(claims=claims, source_ip=source.ip, user_agent=source.user_agent).principal
