"""Live events for the console: group naming and after-commit publishing.

Delivery is best effort by design: pages re-fetch over REST on every (re)connect, so a
lost push costs freshness, never correctness. Publishing happens after the database
transaction commits, so a page never shows a change that was rolled back.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

PLATFORM_GROUP_PREFIX = "p"
TENANT_GROUP_PREFIX = "t"


def tenant_group(tenant_id: object, topic: str) -> str:
    """Channel-layer group for one tenant's topic (the tenant id is always in the name)."""
    return f"{TENANT_GROUP_PREFIX}.{tenant_id}.{topic}"


def platform_group(topic: str) -> str:
    """Channel-layer group for platform-wide topics (platform principals only)."""
    return f"{PLATFORM_GROUP_PREFIX}.{topic}"


def publish_now(group: str, event: str, payload: dict[str, Any]) -> None:
    """Send one event to ``group`` immediately; failures are logged, never raised."""
    layer = get_channel_layer()
    if layer is None:
        return
    import time

    message = {"type": "console.event", "event": event, "payload": payload, "sent_at": time.time()}
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.warning("live event dropped", extra={"group": group, "event": event})


def publish_on_commit(group: str, event: str, payload: dict[str, Any]) -> None:
    """Publish after the current transaction commits (immediately outside one)."""
    transaction.on_commit(lambda: publish_now(group, event, payload))
