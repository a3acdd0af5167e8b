"""An event goes through the real channels-redis layer to a WebSocket consumer."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.live import platform_group, publish_now
from frontend.consumers import PlatformEventsConsumer
from tenants.models import Principal


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_platform_admin_receives_event_sent_through_redis_layer() -> None:
    from django.conf import settings

    assert settings.CHANNEL_LAYERS["default"]["BACKEND"].startswith("channels_redis")
    from tests.factories import HumanFactory, bind

    admin = await sync_to_async(HumanFactory)(username="root-ws")
    await sync_to_async(bind)(admin, "platform.auditor", None)
    communicator = WebsocketCommunicator(PlatformEventsConsumer.as_asgi(), "/ws/platform/events")
    communicator.scope["user"] = admin
    connected, _ = await communicator.connect()
    assert connected
    await sync_to_async(publish_now)(platform_group("events"), "tenant.created", {"slug": "a"})
    message = await communicator.receive_json_from(timeout=5)
    assert message["event"] == "tenant.created" and message["payload"] == {"slug": "a"}
    assert abs(message["sent_at"] - time.time()) < 60
    await communicator.disconnect()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_non_admin_is_refused_on_connect() -> None:
    user = await sync_to_async(Principal.objects.create_user)(username="u-ws", password="x" * 16)
    communicator = WebsocketCommunicator(PlatformEventsConsumer.as_asgi(), "/ws/platform/events")
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4403


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_tenant_members_get_their_tenants_events_and_nothing_of_others() -> None:
    from controlplane.live import tenant_group
    from frontend.consumers import TenantLiveConsumer
    from tests.factories import HumanFactory, TenantFactory, bind

    a = await sync_to_async(TenantFactory)(slug="live-a")
    b = await sync_to_async(TenantFactory)(slug="live-b")
    alice = await sync_to_async(HumanFactory)()
    bob = await sync_to_async(HumanFactory)()
    await sync_to_async(bind)(alice, "tenant.viewer", a)
    await sync_to_async(bind)(bob, "tenant.viewer", b)

    def communicator(user, slug):
        c = WebsocketCommunicator(TenantLiveConsumer.as_asgi(), f"/ws/t/{slug}/live")
        c.scope["user"] = user
        c.scope["url_route"] = {"kwargs": {"tenant": slug}}
        return c

    alice_ws, bob_ws = communicator(alice, "live-a"), communicator(bob, "live-b")
    assert (await alice_ws.connect())[0] and (await bob_ws.connect())[0]
    intruder = communicator(bob, "live-a")
    connected, code = await intruder.connect()
    assert not connected and code == 4404
    await sync_to_async(publish_now)(
        tenant_group(a.pk, "caches"), "caches.cache.state", {"id": "x", "state": "active"}
    )
    assert (await alice_ws.receive_json_from(timeout=5))["payload"]["state"] == "active"
    assert await bob_ws.receive_nothing(timeout=0.5)
    await alice_ws.disconnect()
    await bob_ws.disconnect()


@pytest.mark.asyncio
async def test_usage_ticker_coalesces_requests_into_one_tick_per_tenant() -> None:
    import asyncio
    import uuid

    from channels.layers import get_channel_layer

    from controlplane.live import tenant_group
    from controlplane.live.usage import UsageDelta, UsageTicker

    # What subscribers receive, read from the real channel layer.
    layer = get_channel_layer()
    t1, t2 = f"t1-{uuid.uuid4().hex[:8]}", f"t2-{uuid.uuid4().hex[:8]}"
    t1_inbox, fleet_inbox = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(tenant_group(t1, "usage"), t1_inbox)
    await layer.group_add(platform_group("usage"), fleet_inbox)
    ticker = UsageTicker(autostart=False)  # flushed by hand below
    for _ in range(50):
        ticker.add(t1, UsageDelta(requests=1, prompt_tokens=100, cached_tokens=80))
    ticker.add(t2, UsageDelta(requests=1, prompt_tokens=10))
    assert await sync_to_async(ticker.flush)() == 2
    tick = (await asyncio.wait_for(layer.receive(t1_inbox), 5))["payload"]
    assert (tick["requests"], tick["cached_tokens"], tick["prompt_tokens"]) == (50, 4000, 5000)
    for _ in range(10):  # the process's own ticker may publish fleet ticks meanwhile
        fleet = (await asyncio.wait_for(layer.receive(fleet_inbox), 5))["payload"]
        if fleet["requests"] == 51:
            break
    assert (fleet["requests"], fleet["tenants"]) == (51, 2)
    assert await sync_to_async(ticker.flush)() == 0  # nothing pending: nothing sent
