"""Remote caches no live record claims: deleted, audited, and their storage booked.

A create superseded by an eviction (or an expiry, a failure) made a remote cache that its
record no longer wants. ``execution`` deletes it as soon as the create returns, and
reconciliation deletes what is left (a worker that died in between) by default: the remote
carries our display name and a record that ended, so nobody else can own it. Until it is
deleted it is stored, and paid for: the record's ``activated_at`` (when the create
returned) to ``ended_at`` (moved to the deletion) is what storage accrual books.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from caches.models import TERMINAL_STATES, CacheObject
from caches.providers.base import TransientProviderError
from caches.providers.vertex import VertexProvider
from caches.services.locks import cache_lock
from tenants.actor import Actor

logger = logging.getLogger(__name__)


def orphan_of_ended_cache(cache: CacheObject | None, remote_name: str) -> bool:
    """Whether ``remote_name`` was made for ``cache`` and the cache has ended (ours to delete)."""
    return (
        cache is not None
        and cache.state in TERMINAL_STATES
        and (not cache.remote_name or cache.remote_name == remote_name)
    )


def orphan_delete(
    *,
    provider: VertexProvider,
    remote_name: str,
    cache: CacheObject | None,
    actor: Actor,
    reason: str,
) -> bool:
    """Delete one orphaned remote cache and write its audit row; False when Vertex could
    not be reached (the next reconciliation tries again).

    For an ended cache the storage stops at the deletion: ``ended_at`` moves there and the
    cache's storage is accrued to it (one idempotent accrual, as for every ended cache).
    """
    from caches.services.storage import cache_storage_accrue_final

    try:
        provider.delete_remote(remote_name)
    except TransientProviderError:
        logger.warning("orphan not deleted (Vertex unreachable)", extra={"remote": remote_name})
        return False
    now = timezone.now()
    with transaction.atomic():
        # No change to the record (no cache, or one already ended): both sides empty.
        before = after = EMPTY
        tenant = None
        if cache is not None:
            locked = cache_lock(cache_id=cache.pk)
            tenant = locked.tenant
            if locked.activated_at is not None and (
                locked.ended_at is None or locked.ended_at < now
            ):
                before = model_snapshot(locked, fields=["ended_at"])
                locked.ended_at = now
                locked.save(update_fields=["ended_at", "updated_at"])
                after = model_snapshot(locked, fields=["ended_at"])
                cache_storage_accrue_final(cache=locked)
        audit_record(
            actor=actor,
            action="caches.remote.delete",
            tenant=tenant,
            target_type="cache" if cache is not None else "vertex_cache",
            target_id=str(cache.pk) if cache is not None else remote_name,
            changes=diff(before, after),
            details={"remote_name": remote_name, "reason": reason},
        )
    return True
