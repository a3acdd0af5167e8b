"""What a black-box sweep of the access boundary tries, each pinned by a test.

Unauthenticated requests, expired bindings, slug case variants and trailing slashes,
HEAD/OPTIONS, malformed ids and bodies (never a 500), reserved role names in Unicode
and case variants, suspended tenants and revoked keys on every entry point.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import AuditEvent, Outcome
from audit.services.denials import audit_denials_wait
from tenants.models import Role, RoleBinding, TenantState
from tenants.services import keys
from tenants.services.tenants import tenant_set_state
from tests.factories import HumanFactory, ServiceAccountFactory, TenantFactory, actor_for, bind


def _denials(**filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(outcome=Outcome.DENIED, **filters).order_by("id"))


@pytest.mark.django_db
def test_an_unauthenticated_request_is_401_and_audited_once_per_source_per_minute(
    api, tenant_a, redis_flush
) -> None:
    for _ in range(3):
        response = api.get(f"/api/v1/tenants/{tenant_a.slug}/caches")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"
    (row,) = _denials(action="tenants.request.unauthenticated")
    assert row.chain == "platform" and row.auth_method == "anonymous"
    assert row.details["reason"] == "not_authenticated" and row.details["refused"] == 1
    assert row.details["entry_point"] == "rest"
    # The next row (after the gate period) carries the two refusals counted meanwhile.
    redis_flush.delete(*redis_flush.keys("*anonymous*refused-gate"))
    api.get("/api/v1/tenants/no-such-tenant/caches")
    latest = _denials(action="tenants.request.unauthenticated")[-1]
    assert latest.details["refused"] == 3


@pytest.mark.django_db
def test_an_unauthenticated_answer_is_the_same_for_a_real_and_a_missing_tenant(
    api, tenant_a, redis_flush
) -> None:
    real = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    ghost = api.get("/api/v1/tenants/no-such-tenant/iam-policy")
    strip = lambda r: {k: v for k, v in r.json()["error"].items() if k != "request_id"}  # noqa: E731
    assert real.status_code == ghost.status_code == 401 and strip(real) == strip(ghost)


@pytest.mark.django_db
def test_an_expired_binding_is_no_binding_404_like_a_missing_tenant(api, tenant_a) -> None:
    former = HumanFactory()
    RoleBinding.objects.create(
        tenant=tenant_a,
        principal=former,
        role=Role.objects.get(name="tenant.admin"),
        expires_at=timezone.now() - dt.timedelta(seconds=1),
    )
    api.force_login(former)
    for path in ("/api/v1/tenants/{}/iam-policy", "/t/{}/"):
        assert api.get(path.format(tenant_a.slug)).status_code == 404
        assert api.get(path.format("no-such-tenant")).status_code == 404
    reasons = [e.details["reason"] for e in _denials(actor_id=str(former.pk))]
    assert reasons == ["no_binding", "no_such_tenant"] * 2


@pytest.mark.django_db
def test_slug_case_variants_and_trailing_slashes_never_reach_another_answer(
    api, tenant_a, admin_a
) -> None:
    """Slugs are lowercase and exact: a member's own tenant in capitals is "no such
    tenant" (404), never a redirect or a 500; a trailing slash is no other route."""
    api.force_login(admin_a)
    assert api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy").status_code == 200
    for path in (
        f"/api/v1/tenants/{tenant_a.slug.upper()}/iam-policy",
        "/api/v1/tenants/Tenant-A/iam-policy",
        f"/t/{tenant_a.slug.upper()}/",
    ):
        assert api.get(path).status_code == 404, path
    slashed = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy/")
    assert slashed.status_code == 404 and slashed.json()["error"]["code"] == "not_found"
    reasons = [e.details["reason"] for e in _denials(actor_id=str(admin_a.pk))]
    assert reasons == ["no_such_tenant"] * 3


@pytest.mark.django_db
def test_head_and_options_are_decided_like_get(api, tenant_a, admin_a, admin_b) -> None:
    url = f"/api/v1/tenants/{tenant_a.slug}/caches"
    api.force_login(admin_b)
    for method in ("head", "options"):
        response = getattr(api, method)(url)
        assert response.status_code == 404, method
        ghost = getattr(api, method)("/api/v1/tenants/no-such-tenant/caches")
        assert ghost.status_code == 404, method
    assert len(_denials(actor_id=str(admin_b.pk))) == 4
    api.force_login(admin_a)
    assert api.head(url).status_code == 200
    # OPTIONS maps to no permission: refused (deny by default), never a schema leak.
    refused = api.options(url)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"


MALFORMED_IDS = [
    "not-a-uuid",
    "0" * 5000,
    "%00",
    "%2e%2e",
    "%F0%9F%92%A3",
    "00000000-0000-0000-0000-000000000000",
    "'; DROP TABLE tenants_tenant; --",
]


@pytest.mark.django_db
@pytest.mark.parametrize("cache_id", MALFORMED_IDS)
def test_malformed_object_ids_are_404_never_500(api, tenant_a, admin_a, cache_id) -> None:
    api.force_login(admin_a)
    for path in (
        f"/api/v1/tenants/{tenant_a.slug}/caches/{cache_id}",
        f"/api/v1/tenants/{tenant_a.slug}/caches/{cache_id}/timeline",
        f"/api/v1/tenants/{tenant_a.slug}/budgets/{cache_id}",
        f"/t/{tenant_a.slug}/caches/{cache_id}/",
    ):
        response = api.get(path)
        assert response.status_code in (400, 404), (path, response.status_code)
    revoke = api.post(f"/api/v1/tenants/{tenant_a.slug}/keys/{cache_id}/revoke", {}, format="json")
    assert revoke.status_code in (400, 404), revoke.status_code


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "content_type", "codes"),
    [
        (b"{", "application/json", {400}),
        (b'{"name": "x", "name": "y"}', "application/json", {400}),
        (b'{"name": "\\u0000"}', "application/json", {400}),
        (b'{"name": "\\ud800"}', "application/json", {400}),
        (b"[" * 10_000 + b"]" * 10_000, "application/json", {400}),
        (b'{"name": ' + b"1" * 5000 + b"}", "application/json", {400}),
        (b"\xff\xfe", "application/json", {400}),
        (b"name=x", "application/x-www-form-urlencoded", {415}),
        (b"{}" + b" " * 3_000_000, "application/json", {413}),
    ],
)
def test_malformed_or_oversized_bodies_get_a_clear_error_never_500(
    api, tenant_a, admin_a, body, content_type, codes
) -> None:
    api.force_login(admin_a)
    response = api.generic(
        "POST", f"/api/v1/tenants/{tenant_a.slug}/roles", data=body, content_type=content_type
    )
    assert response.status_code in codes, (response.status_code, response.content[:200])
    assert response.json()["error"]["code"]
    assert not Role.objects.filter(tenant=tenant_a).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "Platform.admin",
        "PLATFORM_ops",
        "tEnAnT-admin",
        "Cacheplane.x",
        "platform",
        "\uff30latform.admin",  # fullwidth P
        "p\u0131atform.admin",  # dotless i: not ASCII
        "platform\u200b.admin",  # zero-width space
        "tenant.admin\n",
        "\u212aube.admin",  # Kelvin sign, lowercases to "k"
        "ten\u0430nt.admin",  # Cyrillic a
    ],
)
def test_custom_roles_in_a_reserved_namespace_or_outside_ascii_are_refused(
    api, tenant_a, admin_a, name
) -> None:
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/roles",
        {"name": name, "title": "t", "permissions": ["caches.get"]},
        format="json",
    )
    assert response.status_code == 400, name
    assert response.json()["error"]["code"] in {"reserved_role_name", "invalid_input"}
    assert not Role.objects.filter(tenant=tenant_a).exists()


@pytest.fixture
def gateway_client(fresh_gateway):
    from starlette.testclient import TestClient

    from gateway.app import app

    with TestClient(app) as client:
        yield client


def _invoke(client, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post(
        "/v1/chat/completions",
        headers=headers,
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )


@pytest.mark.django_db(transaction=True)
def test_a_suspended_tenant_is_403_tenant_suspended_on_rest_gateway_and_the_key_socket(
    gateway_client, redis_flush
) -> None:
    from asgiref.sync import async_to_sync
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator
    from rest_framework.test import APIClient

    from frontend.routing import websocket_urlpatterns

    tenant = TenantFactory()
    admin = HumanFactory()
    root = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    bind(root, "platform.admin", None)
    robot = ServiceAccountFactory(tenant=tenant)
    bind(robot, "tenant.developer", tenant)
    issued = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="k", principal=robot)
    tenant_set_state(actor=actor_for(root), tenant=tenant, state=TenantState.SUSPENDED)
    keys.key_cache.clear()

    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    answer = rest.get(f"/api/v1/tenants/{tenant.slug}/caches")
    assert (answer.status_code, answer.json()["error"]["code"]) == (403, "tenant_suspended")
    gateway = _invoke(gateway_client, issued.plaintext)
    assert (gateway.status_code, gateway.json()["error"]["code"]) == (403, "tenant_suspended")

    async def socket_close() -> tuple[bool, int]:
        socket = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns),
            f"/ws/t/{tenant.slug}/live",
            headers=[(b"authorization", f"Bearer {issued.plaintext}".encode())],
        )
        return await socket.connect()

    assert async_to_sync(socket_close)() == (False, 4403)
    rows = AuditEvent.objects.filter(tenant=tenant, action__endswith=".api_key.authenticate")
    assert {e.details.get("reason") for e in rows} == {"tenant_suspended"}
    assert rows.count() == 3  # REST, gateway and socket each left a failed-auth row


@pytest.mark.django_db(transaction=True)
def test_a_revoked_key_is_refused_and_audited_on_rest_gateway_and_socket(
    gateway_client, redis_flush
) -> None:
    from asgiref.sync import async_to_sync
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator
    from rest_framework.test import APIClient

    from frontend.routing import websocket_urlpatterns

    tenant = TenantFactory()
    admin = HumanFactory()
    bind(admin, "tenant.admin", tenant)
    issued = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="k")
    keys.api_key_revoke(actor=actor_for(admin), tenant=tenant, key_id=str(issued.key.pk))
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    answer = rest.get(f"/api/v1/tenants/{tenant.slug}/caches")
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "api_key_revoked")
    gateway = _invoke(gateway_client, issued.plaintext)
    assert (gateway.status_code, gateway.json()["error"]["code"]) == (401, "api_key_revoked")

    async def socket_close() -> tuple[bool, int]:
        socket = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns),
            f"/ws/t/{tenant.slug}/live",
            headers=[(b"authorization", f"Bearer {issued.plaintext}".encode())],
        )
        return await socket.connect()

    assert async_to_sync(socket_close)() == (False, 4401)
    rows = AuditEvent.objects.filter(tenant=tenant, action__endswith=".api_key.authenticate")
    assert [e.details["reason"] for e in rows] == ["api_key_revoked"] * 3


@pytest.mark.django_db(transaction=True)
def test_a_socket_cannot_guess_keys_past_the_throttle(redis_flush, settings) -> None:
    from asgiref.sync import async_to_sync
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from frontend.routing import websocket_urlpatterns

    settings.CACHEPLANE_API_KEY_FAILURE_LIMIT = 2
    tenant = TenantFactory()

    async def connect(token: str) -> tuple[bool, int]:
        socket = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns),
            f"/ws/t/{tenant.slug}/live",
            headers=[(b"authorization", f"Bearer {token}".encode())],
        )
        return await socket.connect()

    guesses = [async_to_sync(connect)(f"cpk_guess{i:034d}") for i in range(3)]
    assert guesses[0] == (False, 4401) and guesses[-1] == (False, 4429)
    assert AuditEvent.objects.filter(action="tenants.api_key.lockout").exists()


@pytest.mark.django_db(transaction=True)
def test_a_gateway_request_without_a_key_is_401_and_audited(gateway_client, redis_flush) -> None:
    response = _invoke(gateway_client, None)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "missing_api_key")
    audit_denials_wait()
    (row,) = _denials(action="tenants.request.unauthenticated")
    assert row.details["entry_point"] == "gateway"
