"""The autopilot's savings for the break-even page: the ledger's cost with and without
the cache of the requests whose breakpoints the autopilot placed, nothing else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from billing.services.breakeven import autopilot_savings
from billing.services.usage import usage_flush, usage_record
from tests.providers.conftest import PRICES, set_price

pytestmark = pytest.mark.django_db


def _book(tenant, request_id: str, autopilot: str, at: datetime, **counts) -> None:
    usage_record(
        tenant=tenant,
        request_id=request_id,
        provider="anthropic",
        model="claude-sonnet-4-5",
        occurred_at=at,
        autopilot=autopilot,
        **counts,
    )


def test_only_the_requests_whose_breakpoints_the_autopilot_placed_count(
    tenant_a, tenant_b, redis_flush
):
    set_price("anthropic", "claude-sonnet-4-5", PRICES[("anthropic", "claude-sonnet-4-5")])
    t0 = datetime.now(UTC)  # the price just published applies from now on
    # Sonnet 4.5: input $3.00, cache read $0.30, 5-minute write $3.75, output $15 per 1M.
    _book(tenant_a, "write", "end:5m", t0, prompt_tokens=1210, cache_write_5m_tokens=1210)
    _book(tenant_a, "read", "system:5m,end:5m", t0, prompt_tokens=1225, cached_read_tokens=1210)
    for rid, decision in (("c", "client"), ("n", "none:no_reuse"), ("k", "prompt_cache_key:x")):
        _book(tenant_a, rid, decision, t0, prompt_tokens=2000, cached_read_tokens=2000)
    _book(tenant_a, "off", "", t0, prompt_tokens=2000, cached_read_tokens=2000)
    _book(tenant_b, "other", "end:5m", t0, prompt_tokens=2000, cached_read_tokens=2000)
    usage_flush()
    got = autopilot_savings(tenant=tenant_a, since=t0 - timedelta(hours=1))
    assert got.requests == 2
    assert got.cached_read_tokens == 1210
    # with: 1,210 x 3.75 + (1,210 x 0.30 + 15 x 3.00) = 4,537.5 + 408 µ$
    # without: 2,435 x 3.00 = 7,305 µ$ -> saving 2,359.5 µ$ (rounded half-even per sum)
    assert got.cost_without_cache_micros == 7305
    assert got.cost_micros == 4946  # 4,945.5 rounded half-even
    assert got.saving_micros == 2359
    assert autopilot_savings(tenant=tenant_a, since=t0 + timedelta(seconds=1)).requests == 0


def test_the_break_even_page_shows_this_months_autopilot_saving(tenant_a, admin_a, redis_flush):
    from django.test import Client

    set_price("anthropic", "claude-sonnet-4-5", PRICES[("anthropic", "claude-sonnet-4-5")])
    t0 = datetime.now(UTC)
    _book(tenant_a, "write", "end:5m", t0, prompt_tokens=1210, cache_write_5m_tokens=1210)
    _book(tenant_a, "read", "system:5m,end:5m", t0, prompt_tokens=1225, cached_read_tokens=1210)
    usage_flush()
    client = Client()
    client.force_login(admin_a)
    page = client.get(f"/t/{tenant_a.slug}/break-even/").content.decode()
    section = page.split('id="autopilot-savings"')[1].split("</section>")[0]
    assert "Cache autopilot this month" in section
    assert "2 requests" in section and "1210 tokens" in section
    # the ledger's figures above: $0.0049 with the cache, $0.0073 without, $0.0024 saved
    assert "$0.0049" in section and "$0.0073" in section and "$0.0024" in section
