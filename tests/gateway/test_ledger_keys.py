"""Ledger keys are the gateway's own (issues 22.3, 23.6), prices apply at once (23.3).

The client's ``X-Request-Id`` is kept as ``client_request_id`` and echoed back; the
ledger key (and budget hold id) is minted per request by the gateway, so a reused client
id can never make a served request vanish from the ledger.
"""

from __future__ import annotations

import httpx
from django.db.models import Sum

from tests.gateway.conftest import MODEL
from tests.gateway.support import hard_budget, price_pool_decode_only

BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "count"}],
    "max_tokens": 4,
    "ignore_eos": True,
}


def _flushed_period(budget):
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    usage_flush()
    budget_settlements_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    return period, budget_period_live(period_id=period.pk)


def test_the_same_x_request_id_three_times_books_three_rows_and_three_settlements(
    live_server_url, ref_workers, tenant_keys
):
    from billing.models import BudgetReservation, UsageRecord

    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()  # 1,000 µ$ per output token
    budget = hard_budget(acme, limit_micros=10**9)
    headers = {"authorization": f"Bearer {acme['key']}", "x-request-id": "reused-id-0001"}
    answers = [
        httpx.post(f"{live_server_url}/v1/chat/completions", json=BODY, headers=headers, timeout=30)
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert {a.headers["x-request-id"] for a in answers} == {"reused-id-0001"}
    keys = {a.headers["x-cacheplane-ledger-key"] for a in answers}
    assert len(keys) == 3 and all(k.startswith("gw-") for k in keys)
    period, live = _flushed_period(budget)
    rows = UsageRecord.objects.all_tenants().filter(tenant=acme["tenant"])
    assert set(rows.values_list("request_id", flat=True)) == keys
    assert set(rows.values_list("client_request_id", flat=True)) == {"reused-id-0001"}
    settled = BudgetReservation.objects.all_tenants().filter(tenant=acme["tenant"])
    assert set(settled.values_list("request_id", flat=True)) == keys
    assert set(settled.values_list("state", flat=True)) == {"settled"}
    ledger = rows.aggregate(n=Sum("cost_nanos"))["n"]
    # 3 requests × 4 tokens × 1,000 µ$, plus their prefill (sub-µ$, kept exactly in n$).
    assert 12_000_000 <= ledger < 12_001_000
    assert period.spent_nanos == live["spent_nanos"] == ledger
    assert live["reserved"] == 0


def test_a_price_change_applies_to_the_next_request_at_once(
    live_server_url, ref_workers, tenant_keys
):
    """The gateway's price cache empties on the change (Redis pub/sub): the next hold is
    taken and settled at the new price, not at the old one for up to 60 s."""
    from billing.models import BudgetReservation
    from billing.services.budget_reservations import budget_settlements_flush
    from billing.services.prices import pool_price_create
    from tests.factories import actor_for

    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()  # 1,000 µ$ per output token
    hard_budget(acme, limit_micros=10**9)
    url = f"{live_server_url}/v1/chat/completions"
    headers = {"authorization": f"Bearer {acme['key']}"}
    first = httpx.post(url, json=BODY, headers=headers, timeout=30)
    assert first.status_code == 200
    pool_price_create(
        actor=actor_for(None),
        pool="default",
        source="test: doubled",
        rates={
            "gpu_hour_usd": "7.20",  # 2,000 µ$ per output token from now on
            "prefill_tokens_per_gpu_second": "1000000",
            "decode_tokens_per_gpu_second": "1",
            "kv_blocks_per_gpu": 1000,
        },
    )
    second = httpx.post(url, json=BODY, headers=headers, timeout=30)
    assert second.status_code == 200
    budget_settlements_flush()
    settled = {
        r.request_id: r.actual_micros
        for r in BudgetReservation.objects.all_tenants().filter(tenant=acme["tenant"])
    }
    assert settled[first.headers["x-cacheplane-ledger-key"]] == 4_000
    assert settled[second.headers["x-cacheplane-ledger-key"]] == 8_000
