"""A hosted provider's 429 reaches the client as a clear rate-limit error in the shape of
the endpoint it called, with the provider's ``retry-after`` (once), and costs nothing:
the budget hold is given back and the request's ledger row books no spend.

The local servers answer 429 over a requests-per-minute limit (0 here: every request):
OpenAI and DeepSeek ``{"error": {"type": "requests", "code": "rate_limit_exceeded"}}``
with ``retry-after: 3`` and ``x-ratelimit-*``; Anthropic ``rate_limit_error`` with
``retry-after: 7`` and ``anthropic-ratelimit-*``. The SDKs do not retry
(``max_retries=0``). On ``/v1/chat/completions`` the answer is OpenAI's error body with
the gateway's stable code ``upstream_rate_limited``, and its ``x-ratelimit-*`` headers
stay the gateway's own (the tenant's limits; the provider's are of the tenant's key at
the provider); on ``/v1/messages`` it is Anthropic's ``rate_limit_error``. For a Claude
model either way, Anthropic's ``anthropic-ratelimit-*`` headers are relayed, as on a
success.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.gateway.support import hard_budget
from tests.providers.support import anthropic_client, booked, new_request_id, openai_client

pytestmark = pytest.mark.django_db(transaction=True)
ASK = [{"role": "user", "content": "hi"}]
SAID = {  # each local server's 429 message
    "openai": "Rate limit reached for requests.",
    "deepseek": "Rate limit reached for requests.",
    "anthropic": "Number of requests has exceeded your rate limit",
}


def _assert_nothing_spent(budget, rid, server):
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    assert len(server.received) == 1  # sent once: the gateway does not retry a 429
    row = booked(rid)
    assert row.status == "upstream_error"
    assert (row.prompt_tokens, row.output_tokens, row.cost_nanos) == (0, 0, 0)
    assert not row.estimated
    budget_settlements_flush()
    usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    assert live["reserved"] == 0
    assert period.spent_nanos == live["spent_nanos"] == 0


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize(
    ("server_name", "model"),
    [("openai", "gpt-4o"), ("deepseek", "deepseek-chat"), ("anthropic", "claude-sonnet-4-5")],
)
def test_an_upstream_429_on_chat_completions_is_openais_rate_limit_error(
    live_server_url, hosted, server_name, model, stream
):
    server = hosted[server_name]
    server.requests_per_minute = 0
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    chat = openai_client(live_server_url, hosted["key"]).chat.completions
    with pytest.raises(openai.RateLimitError) as raised:
        chat.create(
            model=model,
            max_tokens=10,
            messages=ASK,
            stream=stream,
            extra_headers={"x-request-id": rid},
        )
    response = raised.value.response
    assert response.status_code == 429
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "upstream_rate_limited"
    label = {"openai": "OpenAI", "deepseek": "DeepSeek", "anthropic": "Anthropic"}[server_name]
    assert error["message"] == f"{label} 429: {SAID[server_name]}"
    retry_after = "7" if server_name == "anthropic" else "3"
    assert response.headers.get_list("retry-after") == [retry_after]
    assert raised.value.body == error  # what the SDK parsed
    assert response.headers["x-cacheplane-ledger-key"]
    relayed = "anthropic-ratelimit-requests-remaining" in response.headers
    assert relayed == (server_name == "anthropic")  # as on a success
    _assert_nothing_spent(budget, rid, server)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_upstream_429_on_messages_is_anthropics_rate_limit_error(
    live_server_url, hosted, stream
):
    server = hosted["anthropic"]
    server.requests_per_minute = 0
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    client = anthropic_client(live_server_url, hosted["key"])
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=10,
            messages=ASK,
            stream=stream,
            extra_headers={"x-request-id": rid},
        )
    response = raised.value.response
    assert response.status_code == 429
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "upstream_rate_limited"
    assert body["error"]["message"] == f"Anthropic 429: {SAID['anthropic']}"
    assert response.headers.get_list("retry-after") == ["7"]
    assert response.headers["anthropic-ratelimit-requests-limit"] == "0"
    assert response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    _assert_nothing_spent(budget, rid, server)
