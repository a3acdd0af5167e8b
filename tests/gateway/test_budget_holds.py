"""Budget holds in Redis: the hard limit holds across gateway processes, on every provider."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.gateway.conftest import MODEL
from tests.gateway.support import (
    gateway_processes,
    hard_budget,
    price_pool_decode_only,
    price_vertex_output_only,
    usage_row_once_booked,
    vertex_env,
    walk_away_mid_stream,
)

FLASH = "gemini-2.5-flash"


async def _fire(urls: list[str], key: str, body: dict, total: int) -> list[httpx.Response]:
    """``total`` requests at once, spread over the gateway processes."""
    limits = httpx.Limits(max_connections=total, max_keepalive_connections=total)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{urls[i % len(urls)]}/v1/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}"},
                )
                for i in range(total)
            )
        )


def _period_after_flush(budget):
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    budget_settlements_flush()
    usage_flush()  # the ledger books the spend (and drops the settled holds)
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    return period, budget_period_live(period_id=period.pk)


def _assert_exactly_fifty(responses: list[httpx.Response]) -> None:
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 50, statuses
    assert statuses.count(402) == 150
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 402} == {
        "budget_exceeded"
    }


@pytest.mark.e2e
def test_two_hundred_requests_over_two_gateways_against_room_for_fifty_on_vllm(
    ref_workers, tenant_keys
):
    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()  # 1,000 µ$ per output token, prefill 0: hold == cost
    budget = hard_budget(acme, limit_micros=50 * 4 * 1000)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 4,
        "ignore_eos": True,
    }
    with gateway_processes(2) as urls:
        responses = asyncio.run(_fire(urls, acme["key"], body, 200))
    _assert_exactly_fifty(responses)
    assert all(r.json()["usage"]["completion_tokens"] == 4 for r in responses if r.is_success)
    period, live = _period_after_flush(budget)
    # Exact to the nano-dollar: 50 × 4,000 µ$ plus each request's sub-µ$ remainder of GPU
    # time (no longer rounded away per request); PostgreSQL = Redis = Σ ledger.
    ledger = _ledger_nanos(acme["tenant"])
    assert 200_000 * 1000 <= ledger < (200_000 + 50) * 1000
    assert period.spent_nanos == ledger == live["spent_nanos"]
    assert live["reserved"] == 0


@pytest.mark.e2e
def test_two_hundred_requests_over_two_gateways_against_room_for_fifty_on_vertex(
    ref_workers, tenant_keys, vertex
):
    from caches.providers.vertex_emulator.token_estimator import estimate_text_tokens

    acme = tenant_keys["gw-acme"]
    price_vertex_output_only(model=FLASH, output_per_mtok="1000")  # 1,000 µ$ per token
    # The emulator's answer is deterministic: asking for exactly its length makes the
    # hold (max_tokens × rate) equal the cost.
    answer_tokens = estimate_text_tokens(f"[vertex-emulator] {FLASH}: hello")
    budget = hard_budget(acme, limit_micros=50 * answer_tokens * 1000)
    body = {
        "model": FLASH,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": answer_tokens,
    }
    with gateway_processes(2, **vertex_env(vertex)) as urls:
        responses = asyncio.run(_fire(urls, acme["key"], body, 200))
    _assert_exactly_fifty(responses)
    assert len(vertex.requests(path_contains=":generateContent")) == 50
    period, live = _period_after_flush(budget)
    assert period.spent_micros == 50 * answer_tokens * 1000 == live["spent"]
    assert live["reserved"] == 0


def test_a_hard_budget_without_a_price_refuses_and_forwards_nothing(
    live_server_url, ref_workers, tenant_keys, vertex
):
    from audit.models import AuditEvent
    from billing.models import ModelPrice

    acme = tenant_keys["gw-acme"]
    ModelPrice.objects.filter(provider="vertex", model=FLASH).delete()
    hard_budget(acme, limit_micros=10**9)
    client = openai.OpenAI(base_url=f"{live_server_url}/v1", api_key=acme["key"], max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model=FLASH, messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
    assert raised.value.status_code == 402
    assert raised.value.body["code"] == "price_not_found"
    assert vertex.requests(path_contains=":generateContent") == []
    assert AuditEvent.objects.filter(
        action="billing.budget.exceeded", tenant=acme["tenant"], outcome="denied"
    ).exists()


def test_the_hold_is_an_upper_bound_with_the_models_max_output_when_max_tokens_is_absent(
    live_server_url, ref_workers, tenant_keys, vertex
):
    acme = tenant_keys["gw-acme"]
    price_vertex_output_only(model=FLASH, output_per_mtok="1")  # 1 µ$ per output token
    hard_budget(acme, limit_micros=65_000)  # below 65,536 output tokens
    client = openai.OpenAI(base_url=f"{live_server_url}/v1", api_key=acme["key"], max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=FLASH, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 402
    assert vertex.requests(path_contains=":generateContent") == []
    # With max_tokens the same request fits, and it is charged its real cost.
    ok = client.chat.completions.create(
        model=FLASH, messages=[{"role": "user", "content": "hi"}], max_tokens=100
    )
    assert ok.usage.completion_tokens > 0


def _reserve(periods, hold_id: str, amount: int, ttl: float):
    from billing.services import budget_reservations as holds
    from controlplane import ops
    from controlplane.redis.budget import budget_reserve

    call = holds.reserve_call(
        periods=periods, hold_id=hold_id, amount_micros=amount, ttl_seconds=ttl
    )
    return holds.reserve_outcome(budget_reserve(ops.redis_client(), call), periods)


def test_holds_of_a_crashed_gateway_expire_and_free_the_budget(tenant_keys, redis_flush):
    from billing.services import budget_reservations as holds

    acme = tenant_keys["gw-acme"]
    hard_budget(acme, limit_micros=1000)
    periods = holds.budget_periods_load(
        tenant_id=str(acme["tenant"].pk), principal_id=str(acme["sa"].pk)
    )
    assert _reserve(periods, "crashed", 1000, ttl=-1) is None  # held, already past expiry
    assert holds.budget_period_live(period_id=periods[0].id)["reserved"] == 1000
    assert holds.budget_holds_expire() == 1  # the sweep (a reserve would do the same)
    assert holds.budget_period_live(period_id=periods[0].id)["reserved"] == 0
    assert _reserve(periods, "next", 1000, ttl=60) is None
    refusal = _reserve(periods, "one-too-many", 1, ttl=60)
    assert refusal.limit_micros == 1000 and refusal.reserved_micros == 1000
    assert holds.budget_holds_expire() == 0  # run twice: nothing more to do


def test_a_settled_hold_stays_pending_until_the_ledger_books_the_request_once(
    tenant_keys, redis_flush, django_capture_on_commit_callbacks
):
    """Settling spends nothing: the hold is cut to the actual cost and stays pending
    under the request's ledger key until the flush books the row, which drops it and adds
    the exact ledger cost. A replayed settlement batch records nothing twice."""
    from django.utils import timezone

    from billing.models import BudgetPeriod, BudgetReservation
    from billing.services import budget_reservations as holds
    from billing.services.usage import usage_flush, usage_record
    from controlplane import ops
    from controlplane.redis import keys
    from controlplane.redis.budget import budget_settle

    acme = tenant_keys["gw-acme"]
    budget = hard_budget(acme, limit_micros=10_000)
    tenant_id, principal_id = str(acme["tenant"].pk), str(acme["sa"].pk)
    periods = holds.budget_periods_load(tenant_id=tenant_id, principal_id=principal_id)
    assert _reserve(periods, "gw-a", 500, ttl=60) is None
    call = holds.settle_call(
        periods=periods,
        hold_id="gw-a",
        tenant_id=tenant_id,
        principal_id=principal_id,
        amount_micros=500,
        actual_micros=420,
    )
    assert budget_settle(ops.redis_client(), call) is True
    assert budget_settle(ops.redis_client(), call) is False  # a second settle: no-op
    live = holds.budget_period_live(period_id=periods[0].id)
    assert (live["spent_nanos"], live["reserved"]) == (0, 420)  # pending, not yet spent
    message = ops.redis_client().lindex(keys.budget_settle_queue(), 0)
    first = holds.budget_settlements_flush()
    assert (first.inserted, first.charged_micros) == (1, 420)
    ops.redis_client().rpush(keys.budget_settle_queue(), message)  # a crash replays it
    again = holds.budget_settlements_flush()
    assert (again.settlements, again.inserted) == (1, 0)
    assert BudgetPeriod.objects.all_tenants().get(budget=budget).spent_nanos == 0
    price_vertex_output_only(model=FLASH, output_per_mtok="1")  # 1 µ$ per output token
    usage_record(
        tenant=acme["tenant"],
        request_id="gw-a",
        provider="vertex",
        model=FLASH,
        occurred_at=timezone.now(),
        prompt_tokens=0,
        output_tokens=420,
        principal_id=principal_id,
    )
    with django_capture_on_commit_callbacks(execute=True):
        usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = holds.budget_period_live(period_id=periods[0].id)
    assert period.spent_nanos == live["spent_nanos"] == 420_000
    assert live["reserved"] == 0
    row = BudgetReservation.objects.all_tenants().get(tenant=acme["tenant"], request_id="gw-a")
    assert (row.state, row.actual_micros, row.amount_micros) == ("settled", 420, 500)


def test_a_disconnected_stream_is_booked_from_what_was_streamed(
    live_server_url, ref_workers, tenant_keys
):
    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()
    budget = hard_budget(acme, limit_micros=10**9)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 600,
        "ignore_eos": True,
        "stream": True,
    }
    walk_away_mid_stream(live_server_url, acme["key"], body, request_id="cut-stream")
    row = usage_row_once_booked("cut-stream")
    assert row.status == "client_disconnect"
    assert 0 < row.output_tokens < 600  # what was streamed, not zero and not the cap
    period, live = _period_after_flush(budget)
    assert period.spent_micros == row.output_tokens * 1000 == live["spent"]
    assert live["reserved"] == 0


def test_a_routing_refusal_gives_back_the_hold_taken_beside_it(
    live_server_url, ref_workers, tenant_keys
):
    """With one pool the price is known before routing, and the hold is taken while the
    request is routed: a request routing refuses (batch work under KV pressure) answers
    the routing refusal, and its hold and concurrency slot are given back at once."""
    from billing.services.budget_reservations import budget_period_live
    from gateway.directory import directory
    from workers.models import Worker

    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()  # 1,000 µ$ per output token: the hold is max_tokens x 1,000
    budget = hard_budget(acme, limit_micros=4 * 1000)  # room for exactly one request
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {acme['key']}"}
    Worker.objects.update(metrics={"vllm:kv_cache_usage_perc": 0.93})
    directory.forget()
    refused = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        json=body,
        headers={**headers, "X-Cacheplane-Priority": "batch"},
    )
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "kv_memory_pressure"
    period, _live = _period_after_flush(budget)
    assert budget_period_live(period_id=period.pk)["reserved"] == 0
    served = httpx.post(f"{live_server_url}/v1/chat/completions", json=body, headers=headers)
    assert served.status_code == 200  # the room the refused request held is back


def test_after_redis_forgets_its_scripts_holds_still_settle_and_usage_is_recorded(
    live_server_url, ref_workers, tenant_keys
):
    """The closing step rides on the usage pipeline as a bare EVALSHA: when Redis lost
    the script (a restart, SCRIPT FLUSH), the step runs again on its own."""
    from billing.models import UsageRecord
    from billing.services.usage import usage_flush
    from controlplane import ops

    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()
    budget = hard_budget(acme, limit_micros=10 * 4 * 1000)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 4,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {acme['key']}"}
    url = f"{live_server_url}/v1/chat/completions"
    assert httpx.post(url, json=body, headers=headers).status_code == 200
    ops.redis_client().script_flush()
    assert httpx.post(url, json=body, headers=headers, timeout=30).status_code == 200
    period, live = _period_after_flush(budget)
    assert (period.spent_micros, live["spent"], live["reserved"]) == (8000, 8000, 0)
    usage_flush()
    assert UsageRecord.objects.all_tenants().filter(tenant=acme["tenant"]).count() == 2


def _ledger_nanos(tenant) -> int:
    from django.db.models import Sum

    from billing.models import UsageRecord

    rows = UsageRecord.objects.all_tenants().filter(tenant=tenant)
    return int(rows.aggregate(n=Sum("cost_nanos"))["n"] or 0)
