"""The WebSocket revocation bound holds at 5 s with the shipped settings, even when the
revoking process is another one (this process's key cache still holds the key)."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from frontend.routing import websocket_urlpatterns
from tenants.models import ApiKey
from tenants.services import keys
from tests.factories import ServiceAccountFactory, TenantFactory, actor_for, bind

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
BOUND = 5.0


def _revoke_elsewhere(key_id: str) -> None:
    # What another web or gateway process does: the row changes, this process's cache not.
    ApiKey.objects.all_tenants().filter(pk=key_id).update(revoked_at=timezone.now())


async def test_a_socket_on_a_key_revoked_by_another_process_closes_within_the_bound() -> None:
    tenant = await sync_to_async(TenantFactory)()
    robot = await sync_to_async(ServiceAccountFactory)(tenant=tenant)
    await sync_to_async(bind)(robot, "tenant.viewer", tenant)
    issued = await sync_to_async(keys.api_key_create)(
        actor=actor_for(robot), tenant=tenant, name="live"
    )
    socket = WebsocketCommunicator(
        AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        f"/ws/t/{tenant.slug}/live",
        headers=[(b"authorization", f"Bearer {issued.plaintext}".encode())],
    )
    assert (await socket.connect())[0]
    # The key is in this process's cache, fresh, at the moment it is revoked elsewhere.
    keys.key_cache.forget(keys.key_digest(issued.plaintext))
    await sync_to_async(keys.api_key_authenticate)(issued.plaintext)
    await sync_to_async(_revoke_elsewhere)(str(issued.key.pk))
    revoked_at = time.monotonic()

    while True:
        message = await socket.receive_output(timeout=BOUND * 2)
        if message["type"] == "websocket.close":
            break
    elapsed = time.monotonic() - revoked_at

    assert message["code"] == 4401
    assert elapsed <= BOUND, f"closed {elapsed:.1f} s after the revocation"
