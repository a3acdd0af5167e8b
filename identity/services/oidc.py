"""Console single sign-on with OpenID Connect (authorization code flow, PKCE), via Authlib.

Authlib does the protocol: discovery, ``state`` and ``nonce`` kept in the session, the
PKCE verifier (S256), the code exchange and the ID token's signature (the provider's
JWKS) and claims (``iss``, ``aud`` = our client id, ``exp``/``iat`` within
``CACHEPLANE_OIDC_CLOCK_SKEW_SECONDS``, ``nonce``). This module adds what is ours: the
discovered issuer must equal the configured one, the ``(issuer, sub)`` pair names the
principal (provisioned just in time at its first login), a disabled principal stays out,
the group mapping is reconciled at every login, and every outcome is audited
(``identity.oidc.login``: succeeded, or denied with a ``reason``).

Entry points do not call this module: they call ``tenants.authentication``
(``oidc_login_begin``, ``oidc_authenticate``), the one module that resolves every kind of
credential and names its outcomes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from authlib.integrations.base_client import OAuthError
from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record
from audit.services.denials import audit_denial
from audit.snapshot import EMPTY, diff, model_snapshot
from controlplane.errors import DomainError
from identity.models import ExternalIdentity
from identity.services.mappings import Reconciled, bindings_reconcile, principal_groups
from tenants.actor import Actor, AuthMethod
from tenants.authentication import OIDC_LOGIN
from tenants.models import Principal, PrincipalKind
from tenants.services.authorization import principal_permissions_forget

logger = logging.getLogger(__name__)

REGISTRY_NAME = "cacheplane"


class SsoRefused(DomainError):
    """An SSO login that does not end in a session; ``reason`` is the stable cause."""

    code = "sso_refused"
    http_status = 403

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(message, details={"reason": reason, **details})
        self.reason = reason


def oidc_enabled() -> bool:
    return bool(settings.CACHEPLANE_OIDC_ISSUER)


def _discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


@lru_cache(maxsize=4)
def _client(issuer: str, client_id: str, secret: str, scopes: str, pkce: bool) -> DjangoOAuth2App:
    # One registry per configuration (settings can differ per test, never per request).
    oauth = OAuth()
    kwargs: dict[str, Any] = {"scope": scopes}
    if pkce:
        kwargs["code_challenge_method"] = "S256"
    oauth.register(
        name=REGISTRY_NAME,
        client_id=client_id,
        client_secret=secret or None,
        server_metadata_url=_discovery_url(issuer),
        client_kwargs=kwargs,
    )
    app: DjangoOAuth2App = oauth.create_client(REGISTRY_NAME)
    return app


def oidc_client() -> DjangoOAuth2App:
    """The configured provider's client, its discovered issuer checked (SsoRefused)."""
    app = _client(
        settings.CACHEPLANE_OIDC_ISSUER,
        settings.CACHEPLANE_OIDC_CLIENT_ID,
        settings.CACHEPLANE_OIDC_CLIENT_SECRET,
        settings.CACHEPLANE_OIDC_SCOPES,
        settings.CACHEPLANE_OIDC_PKCE,
    )
    try:
        metadata = app.load_server_metadata()
    except Exception as error:  # requests' and JSON errors: the provider is unreachable
        app.server_metadata = {}
        raise SsoRefused(
            "idp_unreachable", "The identity provider could not be reached."
        ) from error
    if metadata.get("issuer") != settings.CACHEPLANE_OIDC_ISSUER:
        # OpenID Connect Discovery §4.3: the document's issuer MUST equal the URL used.
        discovered = str(metadata.get("issuer"))[:200]
        app.server_metadata = {}
        raise SsoRefused(
            "issuer_mismatch",
            "The identity provider's issuer does not match the configured one.",
            discovered_issuer=discovered,
        )
    return app


@dataclass(frozen=True)
class SsoLogin:
    """An admitted SSO login: who, what the provider said, what the mapping changed."""

    principal: Principal
    provisioned: bool
    groups: list[str]
    reconciled: Reconciled


def id_token_error_reason(error: Exception) -> str:
    """The stable reason for an Authlib / joserfc validation error."""
    if getattr(error, "error", "") == "mismatching_state":
        return "state_mismatch"
    if getattr(error, "error", "") == "expired_token":
        return "id_token_expired"
    claim = getattr(error, "claim", None) or getattr(error, "claim_name", None)
    if claim in {"aud", "azp"}:
        return "id_token_wrong_audience"
    if claim == "iss":
        return "issuer_mismatch"
    if claim == "nonce":
        return "nonce_mismatch"
    if isinstance(error, OAuthError):
        return "idp_error"
    return "id_token_invalid"


def sso_refusal_record(
    *,
    refused: SsoRefused,
    source_ip: str | None,
    user_agent: str,
    principal: Principal | None = None,
    subject: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Audit a refused SSO login (``identity.oidc.login``, denied, platform chain, in its
    own transaction so that no rollback erases it)."""
    audit_denial(
        actor=Actor(
            principal=principal,
            auth_method=AuthMethod.OIDC,
            source_ip=source_ip,
            user_agent=user_agent[:300],
        ),
        action=OIDC_LOGIN,
        tenant=None,
        target_type="principal" if principal is not None else "oidc_subject",
        target_id=str(principal.pk) if principal is not None else subject[:200],
        details={**(details or {}), **refused.details},
    )


def oidc_callback_claims(*, request: Any) -> dict[str, Any]:
    """Finish the code flow of ``request`` (the callback): the verified ID token's claims,
    merged with the UserInfo response when the provider has one (same ``sub`` only).

    Raises SsoRefused with the reason (``state_mismatch``, ``id_token_expired``,
    ``id_token_wrong_audience``, ``issuer_mismatch``, ``idp_error``...).
    """
    app = oidc_client()
    try:
        token = app.authorize_access_token(
            request, leeway=settings.CACHEPLANE_OIDC_CLOCK_SKEW_SECONDS
        )
    except Exception as error:  # authlib, joserfc and transport errors alike
        reason = id_token_error_reason(error)
        raise SsoRefused(reason, "Single sign-on failed.", error=str(error)[:200]) from error
    claims = dict(token.get("userinfo") or {})
    if not claims.get("sub"):
        raise SsoRefused("id_token_invalid", "The ID token carries no subject.")
    if app.load_server_metadata().get("userinfo_endpoint"):
        try:
            extra = dict(app.userinfo(token=token))
        except Exception as error:
            raise SsoRefused("idp_error", "The UserInfo request failed.") from error
        if extra.get("sub") == claims["sub"]:  # OIDC Core §5.3.2: else it must be ignored
            claims = {**extra, **claims}
    return claims


def claims_groups(claims: dict[str, Any]) -> list[str]:
    raw = claims.get(settings.CACHEPLANE_OIDC_GROUPS_CLAIM) or []
    if isinstance(raw, str):
        raw = [raw]
    return sorted({str(g)[:255] for g in raw if isinstance(g, str | int)})


def _username(claims: dict[str, Any]) -> str:
    raw = claims.get(settings.CACHEPLANE_OIDC_USERNAME_CLAIM) or claims.get("email")
    return str(raw or claims["sub"])[:150]


def sso_login(*, claims: dict[str, Any], source_ip: str | None, user_agent: str) -> SsoLogin:
    """Admit the person the verified ``claims`` describe, or raise SsoRefused (audited).

    First login: a human principal is provisioned (``identity.principal.provision``) and
    linked to ``(iss, sub)``. A username already held by another principal is refused
    (``username_taken``): accounts are never linked by name. Every login reconciles the
    group mapping; a principal that ends with no binding at all is refused
    (``no_access``), a disabled one too (``principal_disabled``).
    """
    issuer, subject = str(claims.get("iss") or settings.CACHEPLANE_OIDC_ISSUER), str(claims["sub"])
    groups = claims_groups(claims)
    facts = {"issuer": issuer[:200], "subject": subject[:200], "groups": groups[:50]}

    def refuse(reason: str, message: str, principal: Principal | None = None) -> SsoRefused:
        refused = SsoRefused(reason, message)
        sso_refusal_record(
            refused=refused,
            source_ip=source_ip,
            user_agent=user_agent,
            principal=principal,
            subject=subject,
            details=facts,
        )
        return refused

    link = (
        ExternalIdentity.objects.select_related("principal")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    provisioned = False
    if link is None:
        try:
            link = _provision(
                issuer=issuer, subject=subject, claims=claims, source_ip=source_ip, ua=user_agent
            )
        except IntegrityError:
            raise refuse(
                "username_taken",
                "An account with your user name already exists here; ask a platform admin.",
            ) from None
        provisioned = True
    principal = link.principal
    if not principal.is_active:
        raise refuse("principal_disabled", "Your account is disabled here.", principal)
    reconciled = bindings_reconcile(
        principal=principal,
        groups=principal_groups(principal, groups),
        source_ip=source_ip,
        user_agent=user_agent,
    )
    principal_permissions_forget(principal)
    if not principal.bindings.exists():
        raise refuse(
            "no_access", "None of your groups grants access to any tenant here.", principal
        )
    with transaction.atomic():
        ExternalIdentity.objects.filter(pk=link.pk).update(
            groups=groups, last_login_at=timezone.now()
        )
        audit_record(
            actor=Actor(
                principal=principal,
                auth_method=AuthMethod.OIDC,
                source_ip=source_ip,
                user_agent=user_agent[:300],
            ),
            action=OIDC_LOGIN,
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            details={
                **facts,
                "provisioned": provisioned,
                "bindings_added": [f"{t}:{r}" for t, r in reconciled.added],
                "bindings_removed": [f"{t}:{r}" for t, r in reconciled.removed],
            },
        )
    return SsoLogin(
        principal=principal, provisioned=provisioned, groups=groups, reconciled=reconciled
    )


def _provision(
    *, issuer: str, subject: str, claims: dict[str, Any], source_ip: str | None, ua: str
) -> ExternalIdentity:
    with transaction.atomic():
        principal = Principal(
            username=_username(claims),
            email=str(claims.get("email") or "")[:254],
            first_name=str(claims.get("given_name") or "")[:150],
            last_name=str(claims.get("family_name") or "")[:150],
            kind=PrincipalKind.HUMAN,
        )
        principal.set_unusable_password()  # signs in through the provider only
        principal.save()
        link = ExternalIdentity.objects.create(principal=principal, issuer=issuer, subject=subject)
        audit_record(
            actor=Actor(
                principal=None, auth_method=AuthMethod.OIDC, source_ip=source_ip, user_agent=ua
            ),
            action="identity.principal.provision",
            tenant=None,
            target_type="principal",
            target_id=str(principal.pk),
            changes=diff(EMPTY, model_snapshot(principal)),
            details={"issuer": issuer[:200], "subject": subject[:200]},
        )
    return link
