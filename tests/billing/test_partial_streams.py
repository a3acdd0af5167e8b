"""A stream the client walks away from is booked from what was streamed, through the real
gateway and the local Vertex wire-protocol server (the vLLM case is in
tests/gateway/test_budget_holds.py).

Prices by hand (docs/prices.md): Gemini 2.5 Flash, $0.30 per 1M input tokens and $2.50
per 1M output tokens: a token in is 300 n$, a token out 2,500 n$.
"""

from __future__ import annotations

import httpx

FLASH = "gemini-2.5-flash"
CHUNKS = 200


def test_a_vertex_stream_cut_mid_way_books_the_prompt_and_the_tokens_streamed_so_far(
    live_server_url, ref_workers, tenant_keys, vertex, price_book
):
    from billing.models import BudgetPeriod, UsageRecord
    from billing.pricing import nanos_to_micros
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush
    from tests.gateway.support import hard_budget, usage_row_once_booked, walk_away_mid_stream

    acme = tenant_keys["gw-acme"]
    budget = hard_budget(acme, limit_micros=10**9)
    # A long generation: 200 chunks 25 ms apart (5 s), each with Gemini's running usage.
    vertex.set_stream_pacing(CHUNKS, 25)
    body = {
        "model": FLASH,
        "messages": [{"role": "user", "content": "tell me everything"}],
        "stream": True,
    }
    walk_away_mid_stream(live_server_url, acme["key"], body, request_id="cut-vertex")
    row = usage_row_once_booked("cut-vertex")
    assert row.status == "client_disconnect" and row.provider == "vertex"
    # The emulator's answer: the same piece every chunk, its token count per chunk.
    (sent,) = vertex.requests(path_contains=":streamGenerateContent")
    assert sent.status == 200
    # The same request streamed to the end (unpaced): 200 chunks' worth of tokens.
    vertex.set_stream_pacing(CHUNKS, 0)
    whole = httpx.post(
        f"{live_server_url}/v1/chat/completions",
        json={**body, "stream_options": {"include_usage": True}},
        headers={"authorization": f"Bearer {acme['key']}", "x-request-id": "whole-vertex"},
        timeout=60,
    )
    assert whole.status_code == 200
    usage_flush()
    full = UsageRecord.objects.all_tenants().get(client_request_id="whole-vertex")
    assert full.status == "ok" and full.output_tokens % CHUNKS == 0
    per_chunk = full.output_tokens // CHUNKS
    streamed_chunks, rest = divmod(row.output_tokens, per_chunk)
    # What was streamed, in whole chunks: at least what the client read, far from all.
    assert rest == 0 and 3 <= streamed_chunks < CHUNKS // 2
    assert row.prompt_tokens > 0 and row.cached_read_tokens == 0
    # prompt × 300 n$ + streamed output × 2,500 n$, exactly.
    assert row.cost_nanos == row.prompt_tokens * 300 + row.output_tokens * 2_500
    assert full.prompt_tokens == row.prompt_tokens
    assert full.cost_nanos == full.prompt_tokens * 300 + full.output_tokens * 2_500
    budget_settlements_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    # The budget follows the ledger, exactly: no per-request µ$ rounding.
    booked = row.cost_nanos + full.cost_nanos
    assert period.spent_nanos == live["spent_nanos"] == booked
    assert period.spent_micros == live["spent"] == nanos_to_micros(booked)
    assert live["reserved"] == 0
