"""WebSocket consumers: authenticate on connect, join groups, only push.

Mutations never arrive over the socket; they go through REST.
"""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from frontend.events import platform_group

CLOSE_UNAUTHORIZED = 4403


class PlatformEventsConsumer(AsyncJsonWebsocketConsumer):
    """Pushes platform-wide events to platform operators."""

    topic = "events"

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_superuser:
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
