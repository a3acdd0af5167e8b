"""A stream its client closes after a few events is booked as the hosted provider bills
it, once, and its budget hold is settled: for Anthropic (the ``anthropic`` SDK on
``/v1/messages``, the ``openai`` SDK on ``/v1/chat/completions``), OpenAI and DeepSeek.

The local servers generate a token every ``stream_delay`` seconds and keep, in
``generated``, how many output tokens each stream produced before it ended (the gateway
closes the upstream when its client leaves, so the provider stops there). What each
provider bills such a stream, and what the gateway can know of it:

- Anthropic: the input side ``message_start`` reported (exact, cache fields included) and
  the output generated; before ``message_delta`` the gateway counts the characters
  streamed / 4, which is every token the server produced (``generated``), give or take
  the one token in flight when the connection closed.
- OpenAI, DeepSeek: the prompt and the completion generated. No usage chunk comes before
  the end, so the gateway books the prompt's estimate (its messages' JSON bytes / 4 + 1,
  never under the provider's count) and the characters streamed / 4.

These models stream every token they bill. Those that do not (GPT-5's hidden reasoning,
spoken output, Claude's extended thinking) book their reservation as an estimate when cut
before the usage: tests/providers/test_hosted_stream_estimates.py.

Prices (n$ a token): Sonnet 4.5 input 3,000, output 15,000; gpt-4o 2,500 / 10,000;
deepseek-chat 270 / 1,100.
"""

from __future__ import annotations

import json

import pytest

from tests.caches.processes import wait_for
from tests.gateway.support import hard_budget
from tests.providers.support import (
    anthropic_client,
    booked,
    chat_content_read,
    new_request_id,
    openai_client,
)

pytestmark = pytest.mark.django_db(transaction=True)
ASK = [{"role": "user", "content": "reply with 200 tokens"}]  # 21 characters: 6 tokens
ASK_JSON_ESTIMATE = len(json.dumps(ASK, separators=(",", ":"))) // 4 + 1  # 51 bytes: 13
LOOKUP = {  # compact JSON of 136 characters: 34 tokens, billed as prompt
    "type": "function",
    "function": {"name": "lookup", "description": "abcd" * 10, "parameters": {"type": "object"}},
}
# 13 + the tools' 138 bytes of JSON / 4 = 47 (the provider bills 6 + 34 = 40)
WITH_TOOL_ESTIMATE = ASK_JSON_ESTIMATE + len(json.dumps([LOOKUP], separators=(",", ":"))) // 4
READ = 3  # content events the client reads before it closes the stream
DELAY = 0.05  # seconds a token: the whole answer would take 10 s


def _anthropic_messages(url, key, rid):
    client = anthropic_client(url, key)
    seen = 0
    with client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=400,
        messages=ASK,
        stream=True,
        extra_headers={"x-request-id": rid},
    ) as stream:
        for event in stream:
            seen += event.type == "content_block_delta"
            if seen == READ:
                break
    return seen


def _chat(model, **more):
    def send(url, key, rid):
        client = openai_client(url, key)
        with client.chat.completions.create(
            model=model,
            max_tokens=400,
            messages=ASK,
            stream=True,
            extra_headers={"x-request-id": rid},
            **more,
        ) as stream:
            return chat_content_read(stream, READ)

    return send


# (server, send, prompt booked, prompt billed, n$ a prompt token, n$ an output token)
CASES = {
    "anthropic_messages": ("anthropic", _anthropic_messages, 6, 6, 3_000, 15_000),
    "anthropic_chat": ("anthropic", _chat("claude-sonnet-4-5"), 6, 6, 3_000, 15_000),
    "openai_chat": ("openai", _chat("gpt-4o"), ASK_JSON_ESTIMATE, 6, 2_500, 10_000),
    "openai_chat_tools": (
        "openai",
        _chat("gpt-4o", tools=[LOOKUP]),
        WITH_TOOL_ESTIMATE,
        40,
        2_500,
        10_000,
    ),
    "deepseek_chat": ("deepseek", _chat("deepseek-chat"), ASK_JSON_ESTIMATE, 6, 270, 1_100),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stream_the_client_closes_is_booked_as_the_provider_bills_it(
    live_server_url, hosted, case
):
    from billing.models import BudgetPeriod, UsageRecord
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    server_name, send, prompt, billed_prompt, prompt_rate, output_rate = CASES[case]
    server = hosted[server_name]
    server.stream_delay = DELAY
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    seen = send(live_server_url, hosted["key"], rid)
    assert seen == READ
    row = booked(rid)
    wait_for(lambda: bool(server.generated), 10, "the server's end of the stream")
    generated = server.generated[-1]
    assert row.status == "client_disconnect"
    assert row.prompt_tokens == prompt >= billed_prompt  # never less than the provider's
    assert row.cached_read_tokens == 0
    assert not row.estimated  # counted from the stream, not the hold
    # What the provider generated (and bills): at least what the client read, far short
    # of the 200 asked for, every token of it booked but the one in flight at the close.
    assert READ <= row.output_tokens <= generated < 200
    assert generated - row.output_tokens <= 1
    assert row.cost_nanos == prompt * prompt_rate + row.output_tokens * output_rate
    # Settled once: the hold is gone, the period's spend is the one row's cost.
    budget_settlements_flush()
    usage_flush()
    usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    assert live["reserved"] == 0
    assert UsageRecord.objects.all_tenants().filter(client_request_id=rid).count() == 1
    assert period.spent_nanos == row.cost_nanos == live["spent_nanos"]
