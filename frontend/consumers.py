"""WebSocket consumers: authenticate on connect, check the binding, join groups, only push.

Mutations never arrive over the socket; they go through REST. A principal joins only the
groups of tenants it holds a binding on (``authorize``), so it receives nothing of others.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from frontend.events import platform_group, tenant_group
from tenants.services.authorization import authorize, principal_has_any_binding

CLOSE_UNAUTHORIZED = 4403
CLOSE_NOT_FOUND = 4404
TENANT_TOPICS = ("caches", "usage", "alerts")
PLATFORM_TOPICS = ("events", "usage", "workers", "alerts")


class _PushConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    async def join(self, groups: list[str]) -> None:
        self.groups_joined = groups
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def console_event(self, message: dict) -> None:
        await self.send_json(
            {
                "event": message["event"],
                "payload": message["payload"],
                "sent_at": message.get("sent_at"),
            }
        )

    async def receive_json(self, content, **kwargs) -> None:
        return None  # push only: anything the client sends is ignored


class PlatformEventsConsumer(_PushConsumer):
    """Platform-wide events and snapshots, for principals holding ``tenants.list``."""

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
        await self.join([platform_group(topic) for topic in PLATFORM_TOPICS])


class TenantLiveConsumer(_PushConsumer):
    """One tenant's cache lifecycle events, usage ticks and alerts, for its members."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        slug = self.scope["url_route"]["kwargs"]["tenant"]
        tenant = await database_sync_to_async(_tenant_if_member)(user, slug)
        if tenant is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.join([tenant_group(tenant.pk, topic) for topic in TENANT_TOPICS])


def _tenant_if_member(user, slug: str):
    from tenants.models import Tenant

    if user is None or not user.is_authenticated:
        return None
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None or not principal_has_any_binding(principal=user, tenant=tenant):
        return None
    return tenant
