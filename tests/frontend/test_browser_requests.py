"""The request log and the time picker in a real browser (Playwright, Debian's Chromium):
a request just sent with the OpenAI SDK shows in the log, a spend bar links to the
requests behind it, and a chart zooms by drag and shows exact values on hover. Every page
is checked for console errors and with axe (``ConsolePage.check``)."""

from __future__ import annotations

import re

import openai
import pytest

from tests.conftest import REF_MODEL
from tests.frontend.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CHART = "window.Chart.getChart('{}')"


def _admin(tenant, username: str = "acme-owner"):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username=username, password=PASSWORD)
    bind(user, "tenant.admin", tenant)
    return user


def _price_the_pool() -> None:
    from billing.services.prices import pool_price_create
    from gateway import pricing
    from tests.factories import actor_for

    pool_price_create(
        actor=actor_for(None),
        pool="default",
        source="test",
        rates={
            "gpu_hour_usd": "4.00",
            "prefill_tokens_per_gpu_second": "2000",
            "decode_tokens_per_gpu_second": "50",
            "kv_blocks_per_gpu": 4096,
        },
    )
    pricing.forget()  # the live server's gateway may have cached "no price" before


def _book_usage() -> None:
    """Flush the usage queue from a thread of its own, as the beat task's worker does
    (Playwright's sync API runs an event loop on the test's thread)."""
    import threading

    from django.db import connection

    from billing.services.usage import usage_flush

    def run() -> None:
        try:
            usage_flush()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)


def _bar_point(console, chart: str, index: int) -> tuple[float, float]:
    """Page coordinates of the middle of a bar of ``chart`` (from the chart's own scales)."""
    console.locator(f"#{chart}").scroll_into_view_if_needed()
    box = console.locator(f"#{chart}").bounding_box()
    x, y = console.evaluate(
        f"(() => {{ const c = {CHART.format(chart)}, p = c.data.datasets[0].data[{index}];"
        " return [c.scales.x.getPixelForValue(p.x), c.scales.y.getPixelForValue(p.y / 2)]; })()"
    )
    return box["x"] + x, box["y"] + y


def test_the_request_log_shows_a_request_just_sent_with_the_openai_sdk(
    console, ref_workers, tenant_keys
) -> None:
    _price_the_pool()
    acme = tenant_keys["gw-acme"]
    _admin(acme["tenant"])
    console.login("acme-owner")
    client = openai.OpenAI(base_url=f"{console.base}/v1", api_key=acme["key"], max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=REF_MODEL,
        max_tokens=3,
        messages=[{"role": "user", "content": "Which plan fits a team of five? " * 8}],
    )
    answer = raw.parse()
    _book_usage()
    console.go("/t/gw-acme/requests/")
    rows = console.locator("#requests-table tbody tr[data-request]")
    assert rows.count() == 1
    row = rows.first.inner_text()
    assert "app" in row and REF_MODEL in row and "OK" in row  # the key by name
    assert str(answer.usage.prompt_tokens) in row and "worker" in row and " ms" in row
    assert "Which plan" not in console.content()  # no prompt content, ever
    console.check()
    console.select_option("#rq-status", "upstream_error")
    console.click("#request-filters button[type=submit]")
    console.wait_for_url(re.compile(r".*status=upstream_error.*"))
    assert console.locator("#requests-table tbody tr[data-request]").count() == 0
    # From a spend bar on the tenant's chart to the requests behind it.
    console.go("/t/gw-acme/")
    console.wait_until("Number(document.getElementById('page').dataset.rangeDrawn) >= 1")
    console.click("[data-range='1h']")
    console.wait_until(f"{CHART.format('spend-chart')}.data.datasets[0].data.some(p => p.y > 0)")
    index = console.evaluate(
        f"{CHART.format('spend-chart')}.data.datasets[0].data.findIndex(p => p.y > 0)"
    )
    console.mouse.click(*_bar_point(console, "spend-chart", index))
    console.wait_for_url(re.compile(r".*/t/gw-acme/requests/\?since=.*&until=.*"))
    assert console.locator("#requests-table tbody tr[data-request]").count() == 1
    console.check()
