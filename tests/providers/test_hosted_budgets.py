"""Budgets hold exactly on every hosted provider: with a price where the hold equals the
cost (output only, ``max_tokens`` the answer's length), room for three requests admits
three, refuses the fourth with 402 before anything is sent, and the period's spend is
the ledger's to the µ$."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.gateway.support import hard_budget
from tests.providers.conftest import set_price
from tests.providers.support import anthropic_client, booked, new_request_id, openai_client

pytestmark = pytest.mark.django_db(transaction=True)
OUTPUT_ONLY = {  # 1,000 USD per 1M output tokens: 1,000 µ$ a token, input free
    "input_per_mtok": "0",
    "cached_input_per_mtok": "0",
    "cache_write_5m_per_mtok": "0",
    "cache_write_1h_per_mtok": "0",
    "output_per_mtok": "1000",
}


def _anthropic(url, key, rid):
    anthropic_client(url, key).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": rid},
    )


def _chat(model):
    def send(url, key, rid):
        openai_client(url, key).chat.completions.create(
            model=model,
            max_completion_tokens=4,
            reasoning_effort="minimal",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": rid},
        ) if model == "gpt-5" else openai_client(url, key).chat.completions.create(
            model=model,
            max_tokens=4,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": rid},
        )

    return send


@pytest.mark.parametrize(
    ("provider", "model", "send", "server"),
    [
        ("anthropic", "claude-sonnet-4-5", _anthropic, "anthropic"),
        ("openai", "gpt-5", _chat("gpt-5"), "openai"),
        ("deepseek", "deepseek-chat", _chat("deepseek-chat"), "deepseek"),
    ],
)
def test_room_for_three_admits_exactly_three(
    live_server_url, hosted, provider, model, send, server
):
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush

    set_price(provider, model, OUTPUT_ONLY)
    budget = hard_budget(hosted, limit_micros=3 * 4_000)
    ids = []
    for _ in range(3):
        ids.append(new_request_id())
        send(live_server_url, hosted["key"], ids[-1])
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as raised:
        send(live_server_url, hosted["key"], new_request_id())
    assert raised.value.status_code == 402
    assert len(hosted[server].received) == 3
    ledger = sum(booked(rid).cost_micros for rid in ids)
    budget_settlements_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    assert ledger == period.spent_micros == live["spent"] == 12_000
    assert live["reserved"] == 0
