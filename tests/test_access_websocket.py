"""WebSocket topics carry permissions, and a socket closes when its access ends.

Real Channels consumers over the real channels-redis layer, real sessions (the
session middleware reads the cookie) and real API keys. The re-check period is set to
0.2 s here so the revocation bound is exercised without waiting 5 s.
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client

from audit.models import AuditEvent, Outcome
from audit.services.denials import audit_denials_wait
from controlplane.live import publish_now, tenant_group
from frontend.routing import websocket_urlpatterns
from tenants.models import RoleBinding, TenantState
from tenants.services import keys
from tenants.services.tenants import tenant_set_state
from tests.factories import HumanFactory, ServiceAccountFactory, TenantFactory, actor_for, bind

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

RECHECK = 0.2


@pytest.fixture(autouse=True)
def _fast_recheck(settings):
    settings.CACHEPLANE_WS_RECHECK_SECONDS = RECHECK


def _app():
    return AuthMiddlewareStack(URLRouter(websocket_urlpatterns))


async def _session_socket(user, slug: str) -> tuple[WebsocketCommunicator, Client]:
    """Log in over HTTP (a real session row) and open the socket with its cookie."""
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = client.cookies["sessionid"].value
    socket = WebsocketCommunicator(
        _app(), f"/ws/t/{slug}/live", headers=[(b"cookie", f"sessionid={cookie}".encode())]
    )
    return socket, client


async def _key_socket(token: str, slug: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        _app(), f"/ws/t/{slug}/live", headers=[(b"authorization", f"Bearer {token}".encode())]
    )


async def _publish_all(tenant) -> None:
    for topic, event in (
        ("caches", "caches.cache.state"),
        ("usage", "usage.tick"),
        ("alerts", "billing.alert"),
    ):
        await sync_to_async(publish_now)(tenant_group(tenant.pk, topic), event, {"t": topic})


async def _received(socket: WebsocketCommunicator) -> set[str]:
    seen: set[str] = set()
    while not await socket.receive_nothing(timeout=0.3):
        seen.add((await socket.receive_json_from(timeout=1))["event"])
    return seen


async def _close_code(socket: WebsocketCommunicator) -> int:
    """The close the server sends within the bound (a few re-check periods)."""
    while True:
        message = await socket.receive_output(timeout=RECHECK * 10)
        if message["type"] == "websocket.close":
            return message["code"]


async def test_a_developer_gets_cache_events_but_no_spend_ticks_or_budget_alerts() -> None:
    tenant = await sync_to_async(TenantFactory)()
    developer = await sync_to_async(HumanFactory)()
    viewer = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(developer, "tenant.developer", tenant)
    await sync_to_async(bind)(viewer, "tenant.viewer", tenant)
    dev_ws, _ = await _session_socket(developer, tenant.slug)
    viewer_ws, _ = await _session_socket(viewer, tenant.slug)
    assert (await dev_ws.connect())[0] and (await viewer_ws.connect())[0]
    await _publish_all(tenant)
    assert await _received(dev_ws) == {"caches.cache.state"}
    assert await _received(viewer_ws) == {"caches.cache.state", "usage.tick", "billing.alert"}
    await dev_ws.disconnect()
    await viewer_ws.disconnect()


async def test_a_member_without_a_readable_topic_is_refused_and_audited() -> None:
    from tenants.services.iam import role_create

    tenant = await sync_to_async(TenantFactory)()
    admin = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(admin, "tenant.admin", tenant)
    role = await sync_to_async(role_create)(
        actor=actor_for(admin),
        tenant=tenant,
        name="keyMinter",
        title="Key minter",
        permissions=["keys.create"],
    )
    minter = await sync_to_async(HumanFactory)()
    await sync_to_async(RoleBinding.objects.create)(tenant=tenant, principal=minter, role=role)
    socket, _ = await _session_socket(minter, tenant.slug)
    connected, code = await socket.connect()
    assert not connected and code == 4403
    await sync_to_async(audit_denials_wait)()
    assert await sync_to_async(
        AuditEvent.objects.filter(
            tenant=tenant, action="frontend.socket.connect", outcome=Outcome.DENIED
        ).exists
    )()


async def test_tenant_b_gets_none_of_a_events_and_its_attempt_is_audited() -> None:
    a = await sync_to_async(TenantFactory)()
    b = await sync_to_async(TenantFactory)()
    bob = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(bob, "tenant.admin", b)
    bob_ws, _ = await _session_socket(bob, b.slug)
    assert (await bob_ws.connect())[0]
    intruder, _ = await _session_socket(bob, a.slug)
    connected, code = await intruder.connect()
    assert not connected and code == 4404
    await _publish_all(a)
    assert await _received(bob_ws) == set()
    # A missing tenant closes the same way and leaves a row of the same shape.
    ghost, _ = await _session_socket(bob, "no-such-tenant")
    assert await ghost.connect() == (False, code)
    await sync_to_async(audit_denials_wait)()
    rows = await sync_to_async(
        lambda: list(
            AuditEvent.objects.filter(action="frontend.socket.connect", outcome=Outcome.DENIED)
        )
    )()
    # Denials are recorded off the request path (audit_denials_wait): compare as a set.
    assert sorted((e.details["reason"], e.details["tenant_ref"]) for e in rows) == [
        ("no_binding", a.slug),
        ("no_such_tenant", "no-such-tenant"),
    ]
    assert {(e.chain, e.actor_id, tuple(sorted(e.details))) for e in rows} == {
        ("platform", str(bob.pk), ("permission", "reason", "tenant_ref"))
    }
    await bob_ws.disconnect()


async def test_removing_the_binding_closes_the_socket_within_the_bound() -> None:
    tenant = await sync_to_async(TenantFactory)()
    user = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(user, "tenant.viewer", tenant)
    socket, _ = await _session_socket(user, tenant.slug)
    assert (await socket.connect())[0]
    await sync_to_async(RoleBinding.objects.filter(principal=user).delete)()
    assert await _close_code(socket) == 4404
    await _publish_all(tenant)
    assert await socket.receive_nothing(timeout=0.3)


async def test_losing_a_permission_leaves_its_topic() -> None:
    tenant = await sync_to_async(TenantFactory)()
    user = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(user, "tenant.viewer", tenant)
    socket, _ = await _session_socket(user, tenant.slug)
    assert (await socket.connect())[0]
    await sync_to_async(RoleBinding.objects.filter(principal=user).delete)()
    await sync_to_async(bind)(user, "tenant.developer", tenant)
    await socket.receive_nothing(timeout=RECHECK * 3)  # one re-check passes
    await _publish_all(tenant)
    assert await _received(socket) == {"caches.cache.state"}
    await socket.disconnect()


async def test_suspending_the_tenant_closes_the_socket_within_the_bound() -> None:
    tenant = await sync_to_async(TenantFactory)()
    user = await sync_to_async(HumanFactory)()
    root = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(user, "tenant.admin", tenant)
    await sync_to_async(bind)(root, "platform.admin", None)
    socket, _ = await _session_socket(user, tenant.slug)
    assert (await socket.connect())[0]
    await sync_to_async(tenant_set_state)(
        actor=actor_for(root), tenant=tenant, state=TenantState.SUSPENDED
    )
    assert await _close_code(socket) == 4403


async def test_logging_out_closes_the_socket_within_the_bound() -> None:
    tenant = await sync_to_async(TenantFactory)()
    user = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(user, "tenant.viewer", tenant)
    socket, client = await _session_socket(user, tenant.slug)
    assert (await socket.connect())[0]
    await sync_to_async(client.post)("/logout/")
    assert await _close_code(socket) == 4401
    await sync_to_async(audit_denials_wait)()
    assert await sync_to_async(
        AuditEvent.objects.filter(
            tenant=tenant, action="frontend.socket.recheck", outcome=Outcome.DENIED
        ).exists
    )()


async def test_revoking_the_key_closes_the_socket_within_the_bound() -> None:
    tenant = await sync_to_async(TenantFactory)()
    admin = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(admin, "tenant.admin", tenant)
    robot = await sync_to_async(ServiceAccountFactory)(tenant=tenant)
    await sync_to_async(bind)(robot, "tenant.viewer", tenant)
    issued = await sync_to_async(keys.api_key_create)(
        actor=actor_for(admin), tenant=tenant, name="ws", principal=robot
    )
    socket = await _key_socket(issued.plaintext, tenant.slug)
    assert (await socket.connect())[0]
    await _publish_all(tenant)
    assert "usage.tick" in await _received(socket)
    await sync_to_async(keys.api_key_revoke)(
        actor=actor_for(admin), tenant=tenant, key_id=str(issued.key.pk)
    )
    assert await _close_code(socket) == 4401
