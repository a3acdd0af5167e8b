"""Live events: topic names, the permission each topic needs, after-commit publishing.

A neutral module: domain apps (tenants, caches, billing, workers, gateway) publish here
and the console's consumers (``frontend.consumers``) subscribe; nothing outside
``frontend`` imports ``frontend`` (``tests/test_access_layering.py`` proves it).

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

#: Each tenant topic and the permission a subscriber must hold at that tenant (the same
#: one REST requires for the data the events carry). A socket joins only the topics it
#: may read, and leaves them when a re-check finds the permission gone.
TENANT_TOPIC_PERMISSIONS: dict[str, str] = {
    "caches": "caches.get",  # cache lifecycle events
    "usage": "usage.get",  # coalesced usage and spend ticks
    "alerts": "budgets.get",  # budget threshold alerts
}

#: Platform topics and the platform permission each needs.
PLATFORM_TOPIC_PERMISSIONS: dict[str, str] = {
    "events": "tenants.list",  # tenant created, suspended, resumed
    "usage": "tenants.list",  # fleet usage ticks
    "workers": "tenants.list",  # worker registry changes
    "alerts": "tenants.list",  # every tenant's budget alerts
}


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
