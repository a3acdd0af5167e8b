"""Moved to ``controlplane.live`` (the neutral live-events module).

Kept so console code written against the old path keeps importing; domain apps must
import ``controlplane.live`` (``tests/test_access_layering.py`` fails otherwise).
"""

from controlplane.live import (
    PLATFORM_TOPIC_PERMISSIONS,
    TENANT_TOPIC_PERMISSIONS,
    platform_group,
    publish_now,
    publish_on_commit,
    tenant_group,
)

__all__ = [
    "PLATFORM_TOPIC_PERMISSIONS",
    "TENANT_TOPIC_PERMISSIONS",
    "platform_group",
    "publish_now",
    "publish_on_commit",
    "tenant_group",
]
