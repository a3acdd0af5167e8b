"""The live usage tile counts every request the gateway closes, priced or not, without a
database query on the event loop (the ledger books the request either way)."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.live import usage
from gateway import metering, pricing
from gateway.metering import Meter

pytestmark = pytest.mark.django_db


def test_an_unpriced_request_closed_on_the_event_loop_still_ticks_the_live_tile(monkeypatch):
    ticker = usage.UsageTicker(autostart=False)
    monkeypatch.setattr(usage, "usage_ticker", ticker)
    pricing.forget()  # a price change just cleared the process's price cache
    meter = Meter(
        request_id="gw-1",
        tenant_id="tenant-1",
        tenant_slug="acme",
        key_id="key-1",
        principal_id="sa-1",
        provider="vllm",
        model="tiny",
        pool="a-pool-without-a-price",
        stream=False,
        started=0.0,
        prompt_tokens=10,
        output_tokens=2,
    )

    async def gateway_closing() -> None:  # what gateway.closing does after its round trip
        metering.tick([meter])

    asyncio.run(gateway_closing())
    pending = ticker._pending["tenant-1"]  # what the next tick publishes
    assert (pending.requests, pending.prompt_tokens, pending.cost_micros) == (1, 10, 0)
