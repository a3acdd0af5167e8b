"""WebSocket consumers: authenticate on connect, join groups, only push.

Mutations never arrive over the socket; they go through REST.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from frontend.events import platform_group
from tenants.services.authorization import authorize

CLOSE_UNAUTHORIZED = 4403


class PlatformEventsConsumer(AsyncJsonWebsocketConsumer):
    """Pushes platform-wide events to principals holding ``tenants.list`` at platform scope."""

    topic = "events"
    permission = "tenants.list"

    async def connect(self) -> None:
        user = self.scope.get("user")
        allowed = (
            user is not None
            and user.is_authenticated
            and await database_sync_to_async(authorize)(
                principal=user, permission=self.permission, tenant=None
            )
        )
        if not allowed:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.group = platform_group(self.topic)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def console_event(self, message: dict) -> None:
        await self.send_json({"event": message["event"], "payload": message["payload"]})
