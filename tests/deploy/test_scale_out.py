"""Two gateway processes on one Redis and one PostgreSQL behave as one gateway: the
hard budget admits exactly what it has room for, a key's rate limit is one limit, and a
prefix one replica placed is followed there by the other (docs/deploy.md, "Capacity")."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from tests.conftest import REF_MODEL as MODEL
from tests.gateway.support import gateway_processes, hard_budget, price_pool_decode_only

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


async def _spread(urls: list[str], key: str, bodies: list[dict]) -> list[httpx.Response]:
    """All of ``bodies`` at once, request i to gateway i mod len(urls)."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{urls[i % len(urls)]}/v1/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}"},
                )
                for i, body in enumerate(bodies)
            )
        )


def _chat(url: str, key: str, body: dict) -> httpx.Response:
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response


def test_two_gateway_processes_hold_the_invariants_of_one(
    ref_workers, tenant_keys, api, redis_flush
):
    from workers import kv_index

    acme, globex = tenant_keys["gw-acme"], tenant_keys["gw-globex"]
    price_pool_decode_only()  # 1,000 µ$ per output token, prefill 0 (<500 tokens): hold == cost
    hard_budget(acme, limit_micros=28 * 4 * 1000)  # routing's 8 requests, then room for 20
    api.force_login(globex["admin"])
    limit = api.post(
        f"/api/v1/tenants/{globex['tenant'].slug}/rate-limits",
        {"api_key": str(globex["key_row"].pk), "requests_per_minute": 12},
        format="json",
    )
    assert limit.status_code == 201, limit.content

    # The KV indexer's freshness stamp (the smoke test runs the real indexer): with it the
    # gateways route on the shared index and placements, not their local guesses.
    stop = threading.Event()

    def stamp() -> None:
        while not stop.is_set():
            kv_index.mark_live(redis_flush, workers=["gw0", "gw1"])
            stop.wait(0.5)

    stamper = threading.Thread(target=stamp, daemon=True)
    stamper.start()
    short = {"model": MODEL, "max_tokens": 4, "ignore_eos": True}
    try:
        with gateway_processes(2) as urls:
            # Routing: a new prefix placed by one replica is followed by the other, which
            # alone would send it to the worker with fewer recent requests.
            followed = []
            for i in range(4):
                first, second = urls[i % 2], urls[(i + 1) % 2]
                body = {
                    **short,
                    "messages": [
                        {"role": "system", "content": f"shared manual {i} " * 12},
                        {"role": "user", "content": "q"},
                    ],
                }
                placed = _chat(first, acme["key"], body)
                again = _chat(second, acme["key"], body)
                followed.append(
                    (
                        placed.headers["x-cacheplane-worker"],
                        again.headers["x-cacheplane-worker"],
                        again.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
                    )
                )
            # Budget: 60 requests over both processes against room for 20.
            budgeted = asyncio.run(
                _spread(
                    urls,
                    acme["key"],
                    [
                        {**short, "messages": [{"role": "user", "content": f"b{i}"}]}
                        for i in range(60)
                    ],
                )
            )
            # Rate limit: 36 requests over both processes against 12 a minute.
            limited = asyncio.run(
                _spread(
                    urls,
                    globex["key"],
                    [
                        {**short, "messages": [{"role": "user", "content": f"r{i}"}]}
                        for i in range(36)
                    ],
                )
            )
    finally:
        stop.set()
        stamper.join()

    for placed_on, followed_to, cached in followed:
        assert followed_to == placed_on
        assert cached > 0
    statuses = [r.status_code for r in budgeted]
    assert statuses.count(200) == 20 and statuses.count(402) == 40, statuses
    statuses = [r.status_code for r in limited]
    assert statuses.count(200) == 12 and statuses.count(429) == 24, statuses

    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    budget_settlements_flush()
    usage_flush()  # the ledger books the spend (holds only reserve)
    period = BudgetPeriod.objects.all_tenants().get(budget__tenant=acme["tenant"])
    # Exact to the nano-dollar: the ledger's sum (28 requests of 4,000 µ$ plus each one's
    # sub-µ$ remainder of GPU time, no longer rounded away per request).
    ledger = _ledger_nanos(acme["tenant"])
    assert 28 * 4 * 1000 * 1000 <= ledger < (28 * 4 * 1000 + 28) * 1000
    assert period.spent_nanos == ledger
    assert period.spent_micros == budget_period_live(period_id=period.pk)["spent"]


def _ledger_nanos(tenant) -> int:
    from django.db.models import Sum

    from billing.models import UsageRecord

    rows = UsageRecord.objects.all_tenants().filter(tenant=tenant)
    return int(rows.aggregate(n=Sum("cost_nanos"))["n"] or 0)
