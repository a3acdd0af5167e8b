"""The one place a cache changes state: checked against the state machine, timestamped,
recorded for the timeline, audited and announced after commit."""

from __future__ import annotations

from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import diff, model_snapshot
from caches.models import TERMINAL_STATES, TRANSITIONS, CacheObject, CacheTransition
from controlplane.live import publish_on_commit, tenant_group
from tenants.actor import Actor


class IllegalTransition(RuntimeError):
    """A bug: code tried a transition the state machine forbids."""


def cache_transition(
    *,
    cache: CacheObject,
    to_state: str,
    actor: Actor,
    reason: str = "",
    extra_fields: tuple[str, ...] = (),
) -> CacheObject:
    """Move ``cache`` (locked by the caller) to ``to_state`` and save the given fields."""
    from_state = cache.state
    if to_state not in TRANSITIONS[from_state]:
        raise IllegalTransition(f"{from_state} → {to_state} is not allowed")
    now = timezone.now()
    cache.state = to_state
    cache.state_changed_at = now
    fields = {"state", "state_changed_at", "updated_at", *extra_fields}
    if to_state in TERMINAL_STATES:
        cache.ended_at = now
        fields.add("ended_at")
        _budget_settle(cache)
    # Before: the stored row (the caller has already set extra_fields in memory).
    stored = CacheObject.objects.only(*fields).get(tenant_id=cache.tenant_id, pk=cache.pk)
    before = model_snapshot(stored, fields=sorted(fields))
    cache.save(update_fields=sorted(fields))
    if from_state != to_state:
        CacheTransition.objects.create(
            tenant_id=cache.tenant_id,
            cache=cache,
            from_state=from_state,
            to_state=to_state,
            reason=reason[:300],
        )
    audit_record(
        actor=actor,
        action=f"caches.cache.{to_state}" if from_state != to_state else "caches.cache.update",
        tenant=cache.tenant,
        target_type="cache",
        target_id=str(cache.pk),
        changes=diff(before, model_snapshot(cache, fields=sorted(fields))),
        details={"reason": reason} if reason else None,
    )
    publish_on_commit(
        tenant_group(cache.tenant_id, "caches"),
        "caches.cache.state",
        {
            "id": str(cache.pk),
            "name": cache.name,
            "state": to_state,
            "from": from_state,
            "expire_at": cache.expire_at.isoformat() if cache.expire_at else None,
        },
    )
    return cache


def _budget_settle(cache: CacheObject) -> None:
    """Book the storage to the cache's last second, then charge what it accrued against
    its hold (release the hold if none accrued). A cache without a hold (created with no
    budget in place) is booked to its end too: its last seconds must not wait for a
    sweep, whose look-back is bounded."""
    from django.db.models import Sum

    from billing.models import BudgetReservation, StorageAccrual
    from billing.pricing import nanos_to_micros
    from billing.services.budgets import budget_release, budget_settle
    from caches.services.storage import cache_storage_accrue_final

    cache_storage_accrue_final(cache=cache)  # to the last second, before any hold settles
    if cache.budget_reservation_id is None:
        return
    # all_tenants: the reservation id comes from the cache row itself
    reservation = (
        BudgetReservation.objects.all_tenants().filter(pk=cache.budget_reservation_id).first()
    )
    if reservation is None:
        return
    accrued = StorageAccrual.objects.filter(tenant_id=cache.tenant_id, cache_id=str(cache.pk))
    total = nanos_to_micros(int(accrued.aggregate(total=Sum("cost_nanos"))["total"] or 0))
    if total:
        budget_settle(reservation=reservation, actual_micros=int(total))
    else:
        budget_release(reservation=reservation)
