"""Single sign-on against a real OpenID Provider (``oidc-provider``, tests/identity/conftest).

The console's side runs in Django's test client; the provider's login page is driven
over HTTP as a browser would (the browser itself: ``test_sso_browser.py``). The code
exchange, discovery and JWKS go over real HTTP from the callback to the provider.
"""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
from authlib.integrations.requests_client import OAuth2Session
from django.test import Client

from audit.models import AuditEvent, Outcome
from identity.models import ExternalIdentity, MappedBinding
from identity.services.mappings import group_mapping_create
from identity.services.oidc import id_token_error_reason, oidc_client
from tenants.models import Principal, RoleBinding
from tests.factories import HumanFactory, TenantFactory, actor_for, bind
from tests.identity.conftest import (
    OTHER_CLIENT_ID,
    OTHER_CLIENT_SECRET,
    Idp,
    point_settings_at,
    start_idp,
    stop_idp,
)

pytestmark = pytest.mark.django_db

BASE = "http://testserver"


def sso(client: Client, idp: Idp, account: str, *, tamper_state: bool = False):
    """The whole authorization-code flow; returns the callback's response."""
    start = client.get("/login/sso/")
    assert start.status_code == 302, start.content[:300]
    query = parse_qs(urlsplit(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    back = idp.sign_in(start["Location"], account, until=BASE)
    if tamper_state:
        parts = urlsplit(back)
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        params["state"] = params["state"][:-2] + ("xy" if params["state"][-2:] != "xy" else "zz")
        back = urlunsplit(parts._replace(query=urlencode(params)))
    return client.get(back.removeprefix(BASE))


@pytest.fixture
def mapped():
    """acme-legal: ml-legal-admins → tenant.admin; globex: support-viewers → tenant.viewer."""
    admin = HumanFactory(username="ops")
    bind(admin, "platform.admin", None)
    legal, globex = TenantFactory(slug="acme-legal"), TenantFactory(slug="globex-support")
    bind(HumanFactory(username="legal-owner"), "tenant.admin", legal)  # a manual admin
    group_mapping_create(
        actor=actor_for(admin), tenant=legal, group="ml-legal-admins", role="tenant.admin"
    )
    group_mapping_create(
        actor=actor_for(admin), tenant=globex, group="support-viewers", role="tenant.viewer"
    )
    return legal, globex


def _roles(principal: Principal) -> set[tuple[str, str]]:
    return {
        (b.tenant.slug, b.role.name)
        for b in RoleBinding.objects.filter(principal=principal).select_related("tenant", "role")
    }


def _signed_in(client: Client) -> str | None:
    page = client.get("/")
    return page.wsgi_request.user.username if page.wsgi_request.user.is_authenticated else None


def test_a_first_sso_login_provisions_the_person_and_binds_it_through_its_group(
    client, idp, mapped
) -> None:
    response = sso(client, idp, "alice")

    assert response.status_code == 302 and response["Location"] == "/"
    alice = Principal.objects.get(username="alice@example.com")
    assert not alice.has_usable_password()
    link = ExternalIdentity.objects.get(principal=alice)
    assert (link.issuer, link.subject, link.groups) == (idp.issuer, "alice", ["ml-legal-admins"])
    assert _roles(alice) == {("acme-legal", "tenant.admin")}
    assert _signed_in(client) == "alice@example.com"
    provision = AuditEvent.objects.get(action="identity.principal.provision")
    assert provision.target_id == str(alice.pk) and provision.auth_method == "oidc"
    policy = AuditEvent.objects.get(action="tenants.policy.set", tenant=mapped[0])
    assert policy.auth_method == "idp_mapping" and policy.actor_id is None
    assert policy.details["reason"] == "idp_group_mapping"
    assert policy.details["username"] == "alice@example.com"
    login = AuditEvent.objects.get(action="identity.oidc.login")
    assert login.outcome == Outcome.SUCCESS and login.details["provisioned"] is True
    assert login.details["bindings_added"] == ["acme-legal:tenant.admin"]


def test_the_mapping_adds_and_removes_bindings_across_two_logins_and_keeps_manual_ones(
    client, idp, mapped
) -> None:
    legal, globex = mapped
    assert sso(client, idp, "alice").status_code == 302
    alice = Principal.objects.get(username="alice@example.com")
    extra = TenantFactory(slug="extra-tenant")
    bind(alice, "tenant.developer", extra)  # by hand: the mapping never takes it away
    idp.set_groups("alice", ["support-viewers"])
    client.post("/logout/")

    assert sso(client, idp, "alice").status_code == 302

    assert _roles(alice) == {
        ("globex-support", "tenant.viewer"),
        ("extra-tenant", "tenant.developer"),
    }
    assert set(MappedBinding.objects.values_list("tenant__slug", "role__name")) == {
        ("globex-support", "tenant.viewer")
    }
    changes = AuditEvent.objects.filter(action="tenants.policy.set", auth_method="idp_mapping")
    assert {(e.tenant.slug, e.details["added"], e.details["removed"]) for e in changes} == {
        ("acme-legal", 1, 0),
        ("acme-legal", 0, 1),
        ("globex-support", 1, 0),
    }
    second = AuditEvent.objects.filter(action="identity.oidc.login").order_by("-seq").first()
    assert second.details["bindings_removed"] == ["acme-legal:tenant.admin"]
    assert second.details["provisioned"] is False


def test_the_mapping_never_removes_a_tenants_last_admin(client, idp, mapped) -> None:
    legal, _ = mapped
    RoleBinding.objects.filter(tenant=legal, principal__username="legal-owner").delete()
    assert sso(client, idp, "alice").status_code == 302
    idp.set_groups("alice", ["support-viewers"])
    client.post("/logout/")

    assert sso(client, idp, "alice").status_code == 302

    alice = Principal.objects.get(username="alice@example.com")
    assert _roles(alice) == {("acme-legal", "tenant.admin"), ("globex-support", "tenant.viewer")}
    kept = AuditEvent.objects.get(action="identity.group_mapping.reconcile")
    assert kept.outcome == Outcome.DENIED and kept.details["reason"] == "last_tenant_admin"


def test_a_person_whose_groups_map_to_nothing_gets_the_no_access_page(client, idp, mapped) -> None:
    response = sso(client, idp, "carol")

    assert response.status_code == 403
    assert b"No access" in response.content and b"no_access" in response.content
    assert _signed_in(client) is None
    carol = Principal.objects.get(username="carol@example.com")  # provisioned, unbound
    assert not carol.bindings.exists()
    denial = AuditEvent.objects.get(action="identity.oidc.login")
    assert denial.outcome == Outcome.DENIED and denial.details["reason"] == "no_access"


def test_a_disabled_person_cannot_sign_in_with_sso(client, idp, mapped) -> None:
    assert sso(client, idp, "alice").status_code == 302
    client.post("/logout/")
    Principal.objects.filter(username="alice@example.com").update(is_active=False)

    response = sso(client, idp, "alice")

    assert response.status_code == 403 and b"principal_disabled" in response.content
    assert _signed_in(client) is None
    assert AuditEvent.objects.filter(
        action="identity.oidc.login", outcome=Outcome.DENIED, details__reason="principal_disabled"
    ).exists()


def test_a_tampered_state_is_refused_and_nothing_is_provisioned(client, idp, mapped) -> None:
    response = sso(client, idp, "alice", tamper_state=True)

    assert response.status_code == 403 and b"state_mismatch" in response.content
    assert _signed_in(client) is None
    assert not Principal.objects.filter(username="alice@example.com").exists()
    denial = AuditEvent.objects.get(action="identity.oidc.login")
    assert denial.outcome == Outcome.DENIED and denial.details["reason"] == "state_mismatch"


def test_a_callback_without_a_started_login_is_refused(client, idp, mapped) -> None:
    response = client.get("/login/sso/callback/?code=abc&state=forged")

    assert response.status_code == 403 and b"state_mismatch" in response.content


def test_an_issuer_that_differs_from_the_configured_one_is_refused(
    client, tmp_path, idp_installed, settings, mapped
) -> None:
    # The provider calls itself http://localhost:PORT; we were told http://127.0.0.1:PORT.
    provider, process = start_idp(
        tmp_path, redirect_uris=["http://testserver/login/sso/callback/"], issuer_host="localhost"
    )
    try:
        point_settings_at(settings, provider)
        settings.CACHEPLANE_OIDC_ISSUER = provider.issuer.replace("localhost", "127.0.0.1")
        response = client.get("/login/sso/")
    finally:
        stop_idp(process)

    assert response.status_code == 403 and b"issuer_mismatch" in response.content
    denial = AuditEvent.objects.get(action="identity.oidc.login")
    assert denial.details["reason"] == "issuer_mismatch"
    assert denial.details["discovered_issuer"] == provider.issuer


def test_an_expired_id_token_is_refused(client, tmp_path, idp_installed, settings, mapped) -> None:
    # A provider whose clock is two hours behind issues ID tokens that expired an hour ago.
    provider, process = start_idp(
        tmp_path,
        redirect_uris=["http://testserver/login/sso/callback/"],
        clock_skew_seconds=-7200,
    )
    try:
        point_settings_at(settings, provider)
        response = sso(client, provider, "alice")
    finally:
        stop_idp(process)

    assert response.status_code == 403 and b"id_token_expired" in response.content
    assert _signed_in(client) is None
    assert not Principal.objects.filter(username="alice@example.com").exists()


def _other_app_sign_in(idp: Idp, account: str) -> tuple[OAuth2Session, str, str, str]:
    """``account`` signs in to ``other-app`` (the provider's second client): its client,
    the redirect back to it, the PKCE verifier and the nonce that flow used."""
    metadata = oidc_client().load_server_metadata()
    other = OAuth2Session(
        client_id=OTHER_CLIENT_ID,
        client_secret=OTHER_CLIENT_SECRET,
        scope="openid email",
        redirect_uri="http://other-app.test/callback",
        code_challenge_method="S256",
    )
    verifier, nonce = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
    url, _state = other.create_authorization_url(
        metadata["authorization_endpoint"], nonce=nonce, code_verifier=verifier
    )
    return other, idp.sign_in(url, account, until="http://other-app.test/"), verifier, nonce


def test_a_code_issued_to_another_client_is_refused_at_the_callback(client, idp, mapped) -> None:
    """Cross-client injection through the real ``/login/sso/callback/``: an attacker who
    obtained alice's code for ``other-app`` replays it at our callback with a valid
    ``state`` from our own sign-in. The provider binds a code to its client (and its PKCE
    challenge), so it refuses to exchange it for us: nobody signs in, nothing is
    provisioned, and the refusal is audited."""
    start = client.get("/login/sso/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    _other, back, _verifier, _nonce = _other_app_sign_in(idp, "alice")
    code = parse_qs(urlsplit(back).query)["code"][0]

    response = client.get(f"/login/sso/callback/?{urlencode({'code': code, 'state': state})}")

    assert response.status_code == 403 and b"idp_error" in response.content
    assert _signed_in(client) is None
    assert not Principal.objects.filter(username="alice@example.com").exists()
    denial = AuditEvent.objects.get(action="identity.oidc.login")
    assert denial.outcome == Outcome.DENIED and denial.details["reason"] == "idp_error"
    assert "invalid_grant" in denial.details["error"]


def test_an_id_token_issued_to_another_client_is_refused(idp, mapped) -> None:
    """A real ID token the provider issued to ``other-app`` fails our client's audience
    check (Authlib's ``parse_id_token``, the function the callback calls on the token
    response).

    It is called directly because an honest provider never lets such a token reach our
    callback: the callback gets its ID token from the provider's token endpoint over a
    back channel, authenticated with our client secret, and the provider only returns
    tokens for the client that authenticated (the injection of another client's code is
    refused, see the test above). Reaching the audience check through the callback would
    need a tampered token response, that is a fake provider, which these tests do not use.
    """
    metadata = oidc_client().load_server_metadata()
    other, back, verifier, nonce = _other_app_sign_in(idp, "alice")
    token = other.fetch_token(
        metadata["token_endpoint"], authorization_response=back, code_verifier=verifier
    )
    assert token["id_token"]

    with pytest.raises(Exception) as refused:
        oidc_client().parse_id_token(token, nonce=nonce)

    assert id_token_error_reason(refused.value) == "id_token_wrong_audience"


def test_password_login_can_be_switched_off(client, idp, settings) -> None:
    HumanFactory(username="breakglass", password="correct-horse-battery")
    page = client.get("/login/")
    assert b'id="sso-login"' in page.content and b'id="password-login"' in page.content

    settings.CACHEPLANE_PASSWORD_LOGIN = False
    page = client.get("/login/")
    assert b'id="sso-login"' in page.content and b'id="password-login"' not in page.content
    refused = client.post(
        "/login/", {"username": "breakglass", "password": "correct-horse-battery"}
    )
    assert refused.status_code == 403 and _signed_in(client) is None
    admin = client.post(
        "/admin/login/", {"username": "breakglass", "password": "correct-horse-battery"}
    )
    assert admin.status_code == 200 and _signed_in(client) is None

    settings.CACHEPLANE_PASSWORD_LOGIN = True
    client.post("/login/", {"username": "breakglass", "password": "correct-horse-battery"})
    assert _signed_in(client) == "breakglass"
