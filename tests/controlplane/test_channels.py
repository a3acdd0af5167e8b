"""The Channels layer keeps idle WebSockets open (real channels-redis, real Redis)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.live import platform_group, publish_now
from frontend.consumers import PlatformEventsConsumer

#: Well past channels-redis's 5 s BZPOPMIN and redis-py's 5 s default socket timeout,
#: which together dropped every idle socket after about 5 s.
IDLE_SECONDS = 12


# e2e: the test is its 12 s of idleness; it runs in CI's end-to-end step, not in plain pytest.
@pytest.mark.e2e
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_idle_websocket_stays_open_and_receives_the_next_event() -> None:
    from tests.factories import HumanFactory, bind

    admin = await sync_to_async(HumanFactory)(username="idle-ws")
    await sync_to_async(bind)(admin, "platform.auditor", None)
    communicator = WebsocketCommunicator(PlatformEventsConsumer.as_asgi(), "/ws/platform/events")
    communicator.scope["user"] = admin
    connected, _ = await communicator.connect()
    assert connected
    # The idle period itself is what is tested: nothing is sent for more than twice those timeouts.
    await asyncio.sleep(IDLE_SECONDS)
    assert not communicator.future.done(), communicator.future.exception()
    await sync_to_async(publish_now)(platform_group("events"), "tenant.created", {"slug": "z"})
    message = await communicator.receive_json_from(timeout=10)
    assert message["event"] == "tenant.created" and message["payload"] == {"slug": "z"}
    await communicator.disconnect()
