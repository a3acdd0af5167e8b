"""When a cost happens is when the ledger books it (issue 23.11): a gateway request at its
arrival (prices and budget periods apply there), not when its answer finished."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

FLASH = "gemini-2.5-flash"


@pytest.mark.django_db(transaction=True)
def test_a_gateway_requests_ledger_time_is_its_arrival_not_its_finish(
    live_server_url, tenant_keys, fresh_gateway, redis_flush, vertex, price_book
) -> None:
    from tests.gateway.support import usage_row_once_booked

    acme = tenant_keys["gw-acme"]
    # A slow answer: 20 chunks 100 ms apart, so the request lasts about 2 s upstream.
    vertex.set_stream_pacing(20, 100)
    sent_at = datetime.now(tz=UTC)
    with httpx.stream(
        "POST",
        f"{live_server_url}/v1/chat/completions",
        json={
            "model": FLASH,
            "messages": [{"role": "user", "content": "tell me a long story"}],
            "stream": True,
        },
        headers={"authorization": f"Bearer {acme['key']}", "x-request-id": "slow-answer"},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert sum(1 for line in response.iter_lines() if line.startswith("data: ")) > 20
    finished_at = datetime.now(tz=UTC)
    assert finished_at - sent_at >= timedelta(seconds=1.5)
    row = usage_row_once_booked("slow-answer")
    assert row.status == "ok" and row.output_tokens > 0
    # Booked at the arrival: after the client sent it, long before the answer ended.
    assert sent_at <= row.occurred_at < sent_at + timedelta(milliseconds=500)
    assert row.occurred_at < finished_at - timedelta(seconds=1)
