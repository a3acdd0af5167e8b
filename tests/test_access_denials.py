"""Denials are recorded in their own transaction: the caller's rollback cannot erase them.

Transactional tests (``transaction=True``): the point is what survives a real rollback,
which Django's per-test transaction would hide.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.models import AuditEvent, Outcome
from audit.services import audit_record
from audit.services.denials import audit_denial, audit_denials_wait
from billing.errors import BudgetExceeded
from billing.services import budget_create, budget_reserve
from tests.billing.conftest import price_book  # noqa: F401  (the seeded price book fixture)
from tests.caches.conftest import big_content
from tests.factories import actor_for

DOLLAR = 1_000_000


def _chain_is_contiguous(tenant) -> bool:
    seqs = list(
        AuditEvent.objects.filter(chain=f"tenant:{tenant.pk}")
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    return seqs == list(range(1, len(seqs) + 1))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("price_book")
def test_a_cache_create_refused_by_the_budget_leaves_its_denial_row(
    api, vertex, tenant_a, admin_a
) -> None:
    budget_create(
        actor=actor_for(admin_a),
        tenant=tenant_a,
        name="tiny",
        period="month",
        limit_micros=1,
        thresholds=[100],
    )
    api.force_login(admin_a)
    body = {
        "name": "refused",
        "provider": "vertex",
        "model": "gemini-2.5-flash",
        "content": big_content(),
        "ttl_seconds": 3600,
    }
    response = api.post(f"/api/v1/tenants/{tenant_a.slug}/caches", body, format="json")
    assert response.status_code == 402
    assert response.json()["error"]["code"] == "budget_exceeded"
    audit_denials_wait()
    denial = AuditEvent.objects.get(action="billing.budget.exceeded", tenant=tenant_a)
    assert denial.outcome == Outcome.DENIED
    assert denial.actor_id == str(admin_a.pk)
    from caches.models import CacheObject

    assert (
        not CacheObject.objects.all_tenants().filter(tenant=tenant_a).exists()
    )  # the rest rolled back
    assert _chain_is_contiguous(tenant_a)


@pytest.mark.django_db(transaction=True)
def test_a_denial_inside_a_transaction_that_holds_the_chain_head_is_written_after_it(
    tenant_a, admin_a
) -> None:
    """The self-deadlock hazard: the caller already appended to the tenant's chain (so
    it holds the head lock) when a budget refuses; the denial must neither deadlock nor
    vanish with the rollback."""
    actor = actor_for(admin_a)
    budget_create(
        actor=actor, tenant=tenant_a, name="b", period="month", limit_micros=10, thresholds=[100]
    )
    with pytest.raises(BudgetExceeded), transaction.atomic():
        audit_record(actor=actor, action="caches.cache.create", tenant=tenant_a)
        budget_reserve(
            tenant=tenant_a,
            principal=admin_a,
            estimate_micros=DOLLAR,
            request_id="held-head",
            actor=actor,
        )
    audit_denials_wait()
    actions = list(
        AuditEvent.objects.filter(tenant=tenant_a).order_by("seq").values_list("action", flat=True)
    )
    assert "caches.cache.create" not in actions  # rolled back with the caller
    assert actions[-1] == "billing.budget.exceeded"
    assert _chain_is_contiguous(tenant_a)


@pytest.mark.django_db(transaction=True)
def test_a_denial_survives_the_rollback_of_a_committing_caller_too(tenant_a, admin_a) -> None:
    actor = actor_for(admin_a)
    with transaction.atomic():
        audit_record(actor=actor, action="tenants.tenant.touch", tenant=tenant_a)
        audit_denial(actor=actor, action="caches.cache.get", tenant=tenant_a, target_id="x")
    audit_denials_wait()
    actions = list(
        AuditEvent.objects.filter(tenant=tenant_a).order_by("seq").values_list("action", flat=True)
    )
    assert actions[-2:] == ["tenants.tenant.touch", "caches.cache.get"]
    assert _chain_is_contiguous(tenant_a)


@pytest.mark.django_db(transaction=True)
def test_a_denial_in_a_transaction_without_the_head_is_written_before_it_returns(
    tenant_a, admin_a
) -> None:
    actor = actor_for(admin_a)
    with transaction.atomic():
        audit_denial(actor=actor, action="caches.cache.get", tenant=tenant_a, target_id="x")
        # Committed on its own connection already: visible from another connection.
        from concurrent.futures import ThreadPoolExecutor

        from django.db import connections

        def committed() -> int:
            try:
                return AuditEvent.objects.filter(tenant=tenant_a).count()
            finally:
                connections.close_all()

        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(committed).result() == 1
        transaction.set_rollback(True)
    assert AuditEvent.objects.filter(tenant=tenant_a, outcome=Outcome.DENIED).count() == 1
