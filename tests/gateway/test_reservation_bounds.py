"""Reservations bound what a request can spend: per prompt, per choice, and a request whose
output has no bound is refused under a hard budget (issue #23.2 / #23.4)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.adapters.base import output_bound, prompt_count, sequences_per_prompt
from tests.gateway.conftest import MODEL
from tests.gateway.support import hard_budget, price_pool_decode_only

MICROS_PER_TOKEN = 1_000  # price_pool_decode_only: prefill 0, 1,000 µ$ per decoded token


def _spent(budget) -> dict[str, int]:
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    # Spend follows the ledger: book what the gateway queued, then its settlements.
    usage_flush()
    budget_settlements_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    return budget_period_live(period_id=period.pk)


def _completion(prompts: int, *, max_tokens: int = 4, n: int = 1) -> dict:
    return {
        "model": MODEL,
        "prompt": [f"prompt number {i}" for i in range(prompts)],
        "max_tokens": max_tokens,
        "n": n,
        "ignore_eos": True,
    }


def test_the_output_bound_counts_every_prompt_and_every_sequence() -> None:
    body = _completion(256, max_tokens=4, n=2)
    assert prompt_count(body, "completion") == 256
    assert output_bound(body, "completion", per_sequence=4) == 256 * 2 * 4
    # A list of token ids is one prompt; chat is one prompt whatever its messages.
    assert prompt_count({"prompt": [1, 2, 3]}, "completion") == 1
    assert prompt_count({"messages": [{"role": "user", "content": "x"}] * 3}, "chat") == 1
    # best_of generates (and bills) that many candidates even when n is smaller.
    assert sequences_per_prompt({"n": 2, "best_of": 5}) == 5
    assert sequences_per_prompt({}) == 1


def test_one_request_of_256_prompts_is_refused_when_its_generations_do_not_fit(
    live_server_url, ref_workers, tenant_keys
) -> None:
    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()
    # Room for 100 prompts of 4 tokens; the request runs 256 × 4 = 1,024 tokens
    # (1,024,000 µ$). Reserving max_tokens once (4,000 µ$) let it spend 2.56× the limit.
    budget = hard_budget(acme, limit_micros=100 * 4 * MICROS_PER_TOKEN)
    response = httpx.post(
        f"{live_server_url}/v1/completions",
        json=_completion(256),
        headers={"authorization": f"Bearer {acme['key']}"},
        timeout=120,
    )
    assert response.status_code == 402, response.text
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    # 256 × 4 decoded tokens, plus the prompt bytes' prefill bound (a few µ$).
    assert 256 * 4 * MICROS_PER_TOKEN <= error["details"]["estimate_micros"] < 1_030_000
    live = _spent(budget)
    assert live.get("spent", 0) == 0 and live.get("reserved", 0) == 0
    # A request within the room runs (99 prompts: the prefill bound takes a few µ$).
    ok = httpx.post(
        f"{live_server_url}/v1/completions",
        json=_completion(99),
        headers={"authorization": f"Bearer {acme['key']}"},
        timeout=120,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] == 396
    assert 396 * MICROS_PER_TOKEN <= _spent(budget).get("spent", 0) <= 400 * MICROS_PER_TOKEN


def test_twenty_concurrent_multi_prompt_requests_never_spend_beyond_the_hard_limit(
    live_server_url, ref_workers, tenant_keys
) -> None:
    acme = tenant_keys["gw-acme"]
    price_pool_decode_only()
    # Each request: 8 prompts × n=2 × 4 tokens = 64 tokens = 64,000 µ$; room for 3.
    per_request = 8 * 2 * 4 * MICROS_PER_TOKEN
    limit = 3 * per_request + per_request // 2
    budget = hard_budget(acme, limit_micros=limit)

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{live_server_url}/v1/completions",
                        json=_completion(8, n=2),
                        headers={"authorization": f"Bearer {acme['key']}"},
                    )
                    for _ in range(20)
                )
            )

    responses = asyncio.run(fire())
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 3 and statuses.count(402) == 17, statuses
    live = _spent(budget)
    # Reserving once per request (4,000 µ$) admitted all 20: 1,280,000 µ$ against 224,000.
    assert 3 * per_request <= live.get("spent", 0) <= limit  # + the prompts' prefill µ$
    assert live.get("reserved", 0) == 0


def _identity(key: str):
    from gateway.identity import identify
    from tenants.authentication import scope_source

    source = scope_source({"client": ("127.0.0.1", 1), "headers": []})
    return asyncio.run(identify(f"Bearer {key}", source=source))


def test_an_unbounded_output_under_a_hard_budget_is_refused_with_cost_unbounded(
    tenant_keys, fresh_gateway, redis_flush
) -> None:
    from audit.models import AuditEvent
    from gateway import budget
    from gateway.errors import GatewayError

    acme = tenant_keys["gw-acme"]
    hard_budget(acme, limit_micros=10**9)
    identity = _identity(acme["key"])
    with pytest.raises(GatewayError) as refused:
        asyncio.run(
            budget.plan(identity, amount_micros=5_000, request_id="r-unbounded", unbounded=True)
        )
    assert (refused.value.status, refused.value.code) == (402, "cost_unbounded")
    assert refused.value.param == "max_tokens"
    denial = AuditEvent.objects.get(action="billing.budget.exceeded")
    assert denial.details["reason"] == "cost_unbounded"
    # Bounded, the same request is held as usual.
    hold = asyncio.run(budget.plan(identity, amount_micros=5_000, request_id="r-bounded"))
    assert hold is not None and hold.amount_micros == 5_000


def test_an_unbounded_output_under_soft_budgets_is_held_at_the_default_bound(
    tenant_keys, fresh_gateway, redis_flush
) -> None:
    from gateway import budget

    acme = tenant_keys["gw-acme"]
    hard_budget(acme, limit_micros=10**9, hard=False)
    hold = asyncio.run(
        budget.plan(
            _identity(acme["key"]), amount_micros=7_000, request_id="r-soft", unbounded=True
        )
    )
    assert hold is not None and hold.amount_micros == 7_000


def test_the_vertex_adapter_marks_a_model_without_a_known_maximum_as_unbounded() -> None:
    from gateway.adapters.base import Call
    from gateway.adapters.vertex import VertexAdapter

    def prepared(model: str, **extra: int) -> Call:
        call = Call(
            kind="chat",
            body={"model": model, "messages": [{"role": "user", "content": "hi"}], **extra},
            identity=None,  # type: ignore[arg-type]  # prepare never reads it on Vertex
            cache=None,
            request_id="r",
            priority="interactive",
            session=None,
            started=0.0,
            model=model,
        )
        VertexAdapter().prepare(call)
        return call

    assert prepared("gemini-next-unlisted").output_unbounded
    assert not prepared("gemini-next-unlisted", max_tokens=16).output_unbounded
    listed = prepared("gemini-2.5-flash", n=2)
    assert not listed.output_unbounded and listed.max_output_tokens == 2 * 65_536


def test_a_settlement_above_the_hold_is_booked_in_full_and_the_next_request_is_refused(
    tenant_keys, fresh_gateway, redis_flush
) -> None:
    from gateway import budget, limits, ratelimit
    from gateway.errors import GatewayError

    acme = tenant_keys["gw-acme"]
    limit = 100_000
    budget_row = hard_budget(acme, limit_micros=limit)
    identity = _identity(acme["key"])
    before = budget.OVERSHOOTS._value.get(), budget.OVERSHOOT_MICROS._value.get()

    async def request(held: int, billed: int) -> budget.Hold:
        admission = await ratelimit.plan(
            tenant_id=identity.tenant_id,
            key_id=identity.key_id,
            call_id=f"c-{held}-{billed}",
            estimated_tokens=1,
        )
        hold = await budget.plan(identity, amount_micros=held, request_id="r")
        assert hold is not None
        await limits.admit(identity, admission, hold, request_id="r")
        # The upstream ignored max_tokens: it billed more than the hold bounded.
        await limits.close(admission, hold, actual_tokens=1, actual_micros=billed)
        return hold

    hold = asyncio.run(request(90_000, 115_000))
    assert hold.overshoot_micros == 25_000
    live = _spent(budget_row)
    # Counted in full (the provider billed it): the settled hold stays pending at the billed
    # amount until the ledger books the request's row (spend follows the ledger), so the
    # budget counts it at once, over the limit by one request's overshoot.
    counted = live.get("spent", 0) + live.get("reserved", 0)
    assert counted == 115_000 <= limit + hold.overshoot_micros
    assert budget.OVERSHOOTS._value.get() == before[0] + 1
    assert budget.OVERSHOOT_MICROS._value.get() == before[1] + 25_000
    with pytest.raises(GatewayError) as refused:
        asyncio.run(request(1, 1))
    assert refused.value.code == "budget_exceeded"
    live = _spent(budget_row)
    assert live.get("spent", 0) + live.get("reserved", 0) == 115_000
