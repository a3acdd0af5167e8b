"""An event goes through the real channels-redis layer to a WebSocket consumer."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from frontend.consumers import PlatformEventsConsumer
from frontend.events import platform_group, publish_now
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
    assert message == {"event": "tenant.created", "payload": {"slug": "a"}}
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
