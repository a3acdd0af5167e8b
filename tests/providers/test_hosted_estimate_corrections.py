"""The whole loop of an estimate (issues #26 and #23): a GPT-5 stream the client leaves
before the usage chunk is booked at its reservation through the real gateway and the
local OpenAI server, then corrected over REST with what OpenAI billed, and the ledger,
the budget (PostgreSQL and the gateway's Redis counter) and the hold end on that figure.

Prices (n$ a token): gpt-5 input 1,250, output 10,000. The reservation: 67 prompt tokens
(the messages' compact JSON bytes + 16) × 1,250 + 400 × 10,000 = 4,083,750 n$ → 4,084 µ$.
"""

from __future__ import annotations

import pytest

from tests.caches.processes import wait_for
from tests.gateway.support import hard_budget
from tests.providers.support import booked, chat_content_read, new_request_id, openai_client

pytestmark = pytest.mark.django_db(transaction=True)
ASK = [{"role": "user", "content": "reply with 200 tokens"}]  # 6 tokens at the server


def test_a_cut_reasoning_stream_is_corrected_to_what_openai_billed_over_rest(
    live_server_url, hosted, api
):
    from billing.models import BudgetPeriod
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    server = hosted["openai"]
    server.stream_delay = 0.05
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    with openai_client(live_server_url, hosted["key"]).chat.completions.create(
        model="gpt-5",
        messages=ASK,
        max_completion_tokens=400,
        stream=True,
        extra_headers={"x-request-id": rid},
    ) as stream:
        assert chat_content_read(stream, 3) == 3
    row = booked(rid)
    assert (row.estimated, row.cost_nanos) == (True, 4_084_000)
    wait_for(lambda: bool(server.generated), 10, "the server's end of the stream")
    generated = server.generated[-1]  # what OpenAI bills as completion_tokens
    # What OpenAI's usage object says (its dashboard, or the usage API, for this request).
    api.force_login(hosted["admin"])
    response = api.post(
        f"/api/v1/tenants/{hosted['tenant'].slug}/usage/{row.request_id}/correction",
        {"prompt_tokens": 6, "output_tokens": generated},
        format="json",
    )
    assert response.status_code == 200, response.content
    billed = 6 * 1_250 + generated * 10_000
    assert (response.json()["estimated"], response.json()["cost_nanos"]) == (False, billed)
    budget_settlements_flush()
    usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    assert live["reserved"] == 0
    assert period.spent_nanos == live["spent_nanos"] == billed
