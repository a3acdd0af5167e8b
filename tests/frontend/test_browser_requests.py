"""The request log and the time picker in a real browser (Playwright, Debian's Chromium):
a request just sent with the OpenAI SDK shows in the log, a spend bar links to the
requests behind it; the charts take every named range and a custom From/To, zoom by drag
and show exact values on hover. Every page is checked for console errors and with axe
(``ConsolePage.check``).

Each test prices the ``default`` pool from a fresh price book: a transactional test before
it flushed the tables, the migrations' seeded pool price (in force since 2026-01-01) with
them, and a price created now does not cover usage booked minutes ago (it would book 0)."""

from __future__ import annotations

import re
from datetime import timedelta

import openai
import pytest

from tests.conftest import REF_MODEL
from tests.frontend.browser_helpers import default_pool_priced
from tests.frontend.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CHART = "window.Chart.getChart('{}')"


def _admin(tenant, username: str = "acme-owner"):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username=username, password=PASSWORD)
    bind(user, "tenant.admin", tenant)
    return user


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
    default_pool_priced()
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


def test_a_chart_zooms_by_drag_and_shows_exact_values_on_hover(
    console, tenant_keys, redis_flush
) -> None:
    from django.utils import timezone

    from billing.services import usage_record

    default_pool_priced()
    acme = tenant_keys["gw-acme"]
    now = timezone.now()
    for minutes in (50, 30, 10, 5):
        usage_record(
            tenant=acme["tenant"],
            request_id=f"req-{minutes}",
            provider="vllm",
            model=REF_MODEL,
            occurred_at=now - timedelta(minutes=minutes),
            prompt_tokens=4000,
            cached_read_tokens=3000,
            output_tokens=40,
            worker="w-1",
            pool="default",
        )
    _book_usage()
    _admin(acme["tenant"])
    console.login("acme-owner")
    console.go("/t/gw-acme/")
    console.wait_until("Number(document.getElementById('page').dataset.rangeDrawn) >= 1")
    for name in ("live", "1h", "6h", "24h", "7d", "30d"):  # several ticks at every range
        drawn = console.evaluate("Number(document.getElementById('page').dataset.rangeDrawn||0)")
        console.click(f"[data-range='{name}']")
        console.wait_until(f"Number(document.getElementById('page').dataset.rangeDrawn) > {drawn}")
        ticks = console.evaluate(f"{CHART.format('hit-chart')}.scales.x.ticks.length")
        assert ticks >= 3, (name, ticks)
    drawn = console.evaluate("Number(document.getElementById('page').dataset.rangeDrawn)")
    console.click("[data-range='1h']")
    console.wait_until(f"Number(document.getElementById('page').dataset.rangeDrawn) > {drawn}")
    console.wait_until(f"{CHART.format('spend-chart')}.data.datasets[0].data.some(p => p.y > 0)")
    spend = CHART.format("spend-chart")
    index = console.evaluate(f"{spend}.data.datasets[0].data.findIndex(p => p.y > 0)")
    exact = console.evaluate(f"{spend}.data.datasets[0].data[{index}].y")
    console.mouse.move(*_bar_point(console, "spend-chart", index))
    console.wait_until(f"{spend}.tooltip.getActiveElements().length > 0")
    body = console.evaluate(f"{spend}.tooltip.body.flatMap(b => b.lines).join(' | ')")
    assert f"spend ($): ${exact:.6f}" in body, body
    # Drag across the reuse chart, from a quarter to the middle of its plot area.
    before = console.evaluate(
        f"{CHART.format('hit-chart')}.scales.x.max - {CHART.format('hit-chart')}.scales.x.min"
    )
    console.locator("#hit-chart").scroll_into_view_if_needed()
    box = console.locator("#hit-chart").bounding_box()
    area = console.evaluate(
        f"(() => {{ const a = {CHART.format('hit-chart')}.chartArea;"
        " return [a.left, a.right, a.top, a.bottom]; })()"
    )
    y = box["y"] + (area[2] + area[3]) / 2
    left = box["x"] + area[0] + (area[1] - area[0]) * 0.25
    right = box["x"] + area[0] + (area[1] - area[0]) * 0.5
    console.mouse.move(left, y)
    console.mouse.down()
    console.mouse.move((left + right) / 2, y, steps=4)
    console.mouse.move(right, y, steps=4)
    console.mouse.up()
    console.wait_until("!document.getElementById('zoom-reset').hidden")
    console.wait_until("document.querySelector(\"[data-range='1h']\").ariaPressed === 'false'")
    for chart in ("hit-chart", "spend-chart"):  # both charts show the span dragged
        c = CHART.format(chart)
        console.wait_until(f"{c}.scales.x.max - {c}.scales.x.min < {before} * 0.4")
        assert console.evaluate(f"{c}.scales.x.max - {c}.scales.x.min") > 0
    assert console.evaluate(f"{CHART.format('hit-chart')}.scales.x.ticks.length") >= 3
    assert console.locator("#range-since").input_value() != ""
    drawn = console.evaluate("Number(document.getElementById('page').dataset.rangeDrawn)")
    console.click("#zoom-reset")
    console.wait_until("document.querySelector(\"[data-range='1h']\").ariaPressed === 'true'")
    console.wait_until(f"Number(document.getElementById('page').dataset.rangeDrawn) > {drawn}")
    # A custom From/To (UTC) holding three of the four requests: the charts show exactly
    # that span, re-read over REST, with one spend bar per request in it.
    since, until = now - timedelta(minutes=40), now - timedelta(minutes=2)
    console.fill("#range-since", since.strftime("%Y-%m-%dT%H:%M:%S"))
    console.fill("#range-until", until.strftime("%Y-%m-%dT%H:%M:%S"))
    console.click("#range-custom button[type=submit]")
    span = [int(since.timestamp()) * 1000, int(until.timestamp()) * 1000]
    console.wait_until(f"{spend}.scales.x.min === {span[0]} && {spend}.scales.x.max === {span[1]}")
    assert console.evaluate(
        "[...document.querySelectorAll('[data-range]')].every(b => b.ariaPressed === 'false')"
    )
    for chart in ("hit-chart", "spend-chart"):
        c = CHART.format(chart)
        shown = console.evaluate(f"[{c}.scales.x.min, {c}.scales.x.max]")
        assert shown == span, (chart, shown)
    assert console.evaluate(f"{spend}.data.datasets[0].data.filter(p => p.y > 0).length") == 3
    assert since.strftime("%Y-%m-%d %H:%M:%S") in console.inner_text("#range-shown")
    console.check()
