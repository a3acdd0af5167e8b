"""The shared tenant-isolation suite (STYLE.md): walks every tenant route and consumer.

A principal of tenant B (by session and by API key) gets 404 on every verb of every
route under tenant A, cannot reference A's ids in its own inputs, and receives none of
A's live events. A route added later is picked up automatically from the URL resolver.
"""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from audit.models import AuditEvent
from tenants.models import ApiKey
from tenants.services import keys
from tests.factories import ServiceAccountFactory, actor_for

VERBS = ("get", "post", "put", "patch", "delete")


def _tenant_routes() -> list[str]:
    """Every URL pattern under /api/v1/tenants/<tenant>/ as a template string."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                if "<slug:tenant>" in route:
                    found.append(route)

    walk(get_resolver().url_patterns, "/")
    return sorted(set(found))


ROUTES = _tenant_routes()


def _denial_rows(tenant) -> list:
    """Denials of strangers naming ``tenant``: on the platform chain (they are no part of
    the tenant's log), with the reference they used."""
    from audit.models import AuditEvent, Outcome

    return list(
        AuditEvent.objects.filter(
            tenant__isnull=True, outcome=Outcome.DENIED, details__tenant_ref=tenant.slug
        ).order_by("seq")
    )


def _denials_on(tenant) -> int:
    return len(_denial_rows(tenant))


def test_the_suite_sees_the_tenant_routes() -> None:
    assert any(r.endswith("iam-policy") for r in ROUTES)
    assert len(ROUTES) >= 7


@pytest.fixture
def a_objects(tenant_a, admin_a):
    """Ids of A's objects to plug into path parameters."""
    from caches.models import CacheObject

    issued = keys.api_key_create(actor=actor_for(admin_a), tenant=tenant_a, name="a-key")
    cache = CacheObject.objects.create(
        tenant=tenant_a,
        name="a-cache",
        provider="vllm",
        model="m",
        content={},
        content_digest="a" * 64,
        ttl_seconds=600,
        state="active",
    )
    return {"pk": str(issued.key.pk), "cache_id": str(cache.pk), "op": str(cache.pk)}


def _fill(route: str, slug: str, objects: dict[str, str]) -> str:
    url = route.replace("<slug:tenant>", slug)
    url = url.replace("<uuid:cache_id>", objects.get("cache_id", "x"))
    if "/caches/" in route:  # cache routes get A's real cache, not another object's id
        url = url.replace("<str:pk>", objects["cache_id"])
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: objects.get(m.group(1), "x"), url)


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
def test_b_gets_404_on_every_verb_of_a_route_by_session(api, route, tenant_a, admin_b, a_objects):
    api.force_login(admin_b)
    url = _fill(route, tenant_a.slug, a_objects)
    before = _denials_on(tenant_a)
    for verb in VERBS:
        response = getattr(api, verb)(url, {}, format="json")
        assert response.status_code == 404, (verb, url, response.status_code)
        if url.startswith("/api/"):
            assert response.json()["error"]["code"] == "not_found"
    # Every refusal left evidence (on the platform chain), with B as the actor, and
    # nothing of B's in A's own log.
    assert _denials_on(tenant_a) - before == len(VERBS), url
    assert {e.actor_id for e in _denial_rows(tenant_a)} == {str(admin_b.pk)}
    assert not AuditEvent.objects.filter(tenant=tenant_a, actor_id=str(admin_b.pk)).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
def test_b_gets_404_on_every_verb_of_a_route_by_api_key(
    api, route, tenant_a, tenant_b, admin_b, a_objects
):
    issued = keys.api_key_create(actor=actor_for(admin_b), tenant=tenant_b, name="b-key")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
    url = _fill(route, tenant_a.slug, a_objects)
    for verb in VERBS:
        response = getattr(api, verb)(url, {}, format="json")
        if url.startswith("/api/"):
            assert response.status_code == 404, (verb, url, response.status_code)
            assert _denial_rows(tenant_a)[-1].key_id == str(issued.key.pk)
        else:
            # Console pages take sessions only: a key is sent to the login page, which
            # reveals nothing about the tenant.
            assert response.status_code == 302, (verb, url, response.status_code)
            assert response["Location"].startswith("/login/")


@pytest.mark.django_db
def test_a_nonexistent_tenant_looks_exactly_like_a_forbidden_one(api, tenant_a, admin_b) -> None:
    api.force_login(admin_b)
    real = api.get(f"/api/v1/tenants/{tenant_a.slug}/iam-policy")
    ghost = api.get("/api/v1/tenants/no-such-tenant/iam-policy")
    assert real.status_code == ghost.status_code == 404
    strip = lambda r: {k: v for k, v in r.json()["error"].items() if k != "request_id"}  # noqa: E731
    assert strip(real) == strip(ghost)


@pytest.mark.django_db
def test_b_cannot_reference_a_ids_in_its_own_inputs(
    api, tenant_a, tenant_b, admin_a, admin_b, a_objects
) -> None:
    sa_a = ServiceAccountFactory(tenant=tenant_a)
    api.force_login(admin_b)
    policy = api.get(f"/api/v1/tenants/{tenant_b.slug}/iam-policy").json()
    bindings = [{"role": b["role"], "principal": b["principal"]} for b in policy["bindings"]]
    with_foreign = [*bindings, {"role": "tenant.viewer", "principal": str(sa_a.pk)}]
    response = api.put(
        f"/api/v1/tenants/{tenant_b.slug}/iam-policy",
        {"etag": policy["etag"], "bindings": with_foreign},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_principal"
    key = api.post(
        f"/api/v1/tenants/{tenant_b.slug}/keys",
        {"name": "x", "principal": str(sa_a.pk)},
        format="json",
    )
    assert key.status_code == 400
    revoke = api.post(
        f"/api/v1/tenants/{tenant_b.slug}/keys/{a_objects['pk']}/revoke", {}, format="json"
    )
    assert revoke.status_code == 404
    assert ApiKey.objects.all_tenants().get(pk=a_objects["pk"]).revoked_at is None


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_b_receives_none_of_a_platform_or_tenant_events() -> None:
    """Consumers: a tenant principal cannot join platform topics (tenant topics: see the
    console consumers, which are added to this suite as they appear)."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from frontend.consumers import PlatformEventsConsumer
    from tests.factories import HumanFactory, TenantFactory, bind

    tenant = await sync_to_async(TenantFactory)()
    user = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(user, "tenant.admin", tenant)
    communicator = WebsocketCommunicator(PlatformEventsConsumer.as_asgi(), "/ws/platform/events")
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    assert not connected and code == 4403


ROLE_TOPICS = {
    "tenant.viewer": {"caches", "usage", "alerts"},
    "tenant.developer": {"caches"},
    "tenant.cacheAdmin": {"caches"},
    "tenant.billingAdmin": {"usage", "alerts"},
    "tenant.auditor": {"usage"},
    "tenant.admin": {"caches", "usage", "alerts"},
}


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_each_role_receives_exactly_the_topics_it_may_read_and_nothing_of_b() -> None:
    """Per predefined role: a socket on A gets the topics whose permission the role
    holds (a developer no spend ticks or budget alerts); nobody gets B's events."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from controlplane.live import TENANT_TOPIC_PERMISSIONS, publish_now, tenant_group
    from frontend.consumers import TenantLiveConsumer
    from tenants.permissions import PREDEFINED_ROLES
    from tests.factories import HumanFactory, TenantFactory, bind

    roles = {r.name: r.permissions for r in PREDEFINED_ROLES if r.scope == "tenant"}
    assert set(ROLE_TOPICS) == set(roles)  # a new role must be added to this matrix
    for role, topics in ROLE_TOPICS.items():
        expected = {t for t, p in TENANT_TOPIC_PERMISSIONS.items() if p in roles[role]}
        assert topics == expected, role
    a = await sync_to_async(TenantFactory)()
    b = await sync_to_async(TenantFactory)()
    sockets = {}
    for role in ROLE_TOPICS:
        user = await sync_to_async(HumanFactory)()
        await sync_to_async(bind)(user, role, a)
        socket = WebsocketCommunicator(TenantLiveConsumer.as_asgi(), f"/ws/t/{a.slug}/live")
        socket.scope["user"] = user
        socket.scope["url_route"] = {"kwargs": {"tenant": a.slug}}
        assert (await socket.connect())[0], role
        sockets[role] = socket
    for tenant in (b, a):  # B's events first: none may arrive
        for topic in TENANT_TOPIC_PERMISSIONS:
            await sync_to_async(publish_now)(
                tenant_group(tenant.pk, topic), f"{topic}.event", {"tenant": str(tenant.pk)}
            )
    for role, socket in sockets.items():
        got = []
        while not await socket.receive_nothing(timeout=0.3):
            got.append(await socket.receive_json_from(timeout=1))
        assert {m["payload"]["tenant"] for m in got} <= {str(a.pk)}, role
        assert {m["event"].split(".")[0] for m in got} == ROLE_TOPICS[role], role
        await socket.disconnect()
