"""The one lock order for every transaction that locks more than one row.

PostgreSQL detects a deadlock only after ``deadlock_timeout`` and then kills one of the
transactions (a 500 for a request, a dying task for a worker). Two transactions can only
deadlock when they take two locks in opposite orders, so every write path in Cacheplane
takes its row locks in this order, skipping the levels it does not need:

1. **tenant** row (``tenants_tenant``): ``FOR UPDATE`` only by services that change the
   tenant itself or serialize on it (IAM policy replacement, suspension, salt rotation).
   Inserting any tenant-owned row takes ``FOR KEY SHARE`` on it implicitly (the foreign
   key check), which conflicts with a ``FOR UPDATE`` held elsewhere;
2. **cache object** row(s), in primary-key order when there are several;
3. **operation** row(s) of that cache;
4. **billing** rows: the reservation being settled (if any), then the **budgets** of
   the periods a transaction writes, in primary-key order (``FOR NO KEY UPDATE`` by the
   budget's editors, ``FOR KEY SHARE`` by everything that moves counters: holds,
   settlements, the gateway's hold flush, the storage sweeper, expiry, reprice), then
   those **budget periods** in primary-key order (``FOR NO KEY UPDATE``, never
   ``FOR UPDATE``, which would block every alert insert's foreign-key check). Taken
   through ``billing.services.budget_locks``; threshold alerts of several tenants are
   raised in tenant-id order;
5. **audit chain head** last (``audit.services.audit_record``): the head is held until
   commit and serializes every audited write of the tenant, so nothing may be waited for
   while holding it. ``audit_record`` therefore takes the tenant's ``FOR KEY SHARE`` (the
   one lock its event insert needs) *before* the head, never after.

Rules that follow from it:

- lock a cache with :func:`cache_lock` (``FOR NO KEY UPDATE OF`` the cache row only): a
  joined tenant must not be locked (``of=("self",)``) and ``NO KEY`` lets other
  transactions insert rows referencing the cache (timeline entries, operations);
- an operation is locked through :func:`operation_lock`, which locks its cache first;
  the operation's ``cache_id`` never changes, so reading it unlocked first is safe;
- a service that records audit events on two chains records the tenant chain first and
  the platform chain last;
- background work that touches many tenants' rows (the storage sweeper, the hold flush)
  either takes them in this order or takes one cache per transaction with ``SKIP
  LOCKED`` and leaves what is held to its next run: the sweeper expires each cache in a
  transaction of its own, since an expiry appends to the tenant's audit chain and a
  held chain head must never wait for the next cache's budget rows.

``tests/caches/test_concurrency.py`` drives creates, extends, evicts, IAM and budget
changes concurrently against real PostgreSQL and asserts ``pg_stat_database.deadlocks``
does not move; ``tests/caches/test_concurrency_beats.py`` adds budget creates and
PATCHes, price corrections, reprices, gateway traffic and the real beat schedule;
``tests/billing/test_lock_order.py`` replays the two cycles of issue 29 step by step.
Documented in ``docs/reliability.md``.
"""

from __future__ import annotations

from uuid import UUID

from caches.models import CacheObject, CacheOperation


def cache_lock(*, cache_id: UUID | str) -> CacheObject:
    """Lock one cache row (level 2) and return it with its tenant loaded, unlocked.

    Raises ``CacheObject.DoesNotExist`` when the row is gone.
    """
    return (
        # all_tenants: locks are taken by primary key; the tenant is on the row
        CacheObject.objects.all_tenants()
        .select_for_update(no_key=True, of=("self",))
        .select_related("tenant")
        .get(pk=cache_id)
    )


def operation_lock(
    *, operation_id: UUID | str, skip_locked: bool = False
) -> tuple[CacheObject, CacheOperation] | None:
    """Lock an operation's cache (level 2) and then the operation (level 3).

    Returns None when the operation is gone or, with ``skip_locked``, when another
    transaction holds the operation (a worker already on it).
    """
    cache_id = (
        # all_tenants: operations are executed by id; the tenant is on the row
        CacheOperation.objects.all_tenants()
        .filter(pk=operation_id)
        .values_list("cache_id", flat=True)
        .first()
    )
    if cache_id is None:
        return None
    cache = cache_lock(cache_id=cache_id)
    op = (
        # all_tenants: operations are executed by id; the tenant is on the row
        CacheOperation.objects.all_tenants()
        .select_for_update(no_key=True, skip_locked=skip_locked)
        .filter(pk=operation_id)
        .first()
    )
    if op is None:
        return None
    op.cache = cache
    return cache, op
