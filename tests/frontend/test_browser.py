"""The console in a real browser (Playwright driving Debian's Chromium).

Live server: the real ASGI stack (Django pages, the gateway, Channels over channels-redis)
under uvicorn; traffic through the gateway from the OpenAI SDK; cache creation by a real
Celery worker. Screenshots of the main pages land in frontend/screenshots/ for the README.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import openai
import pytest

from tests.conftest import REF_MODEL

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "frontend" / "screenshots"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed"),
]
PASSWORD = "console-test-password-1"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running on this thread, which makes
    # Django refuse ORM calls from the test body; the test's own queries are synchronous
    # and safe, so the documented escape hatch applies (scoped to this module).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    from controlplane.assets import ensure_assets

    ensure_assets()
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield instance
        instance.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def _user(username: str, role: str | None, tenant):
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username=username, password=PASSWORD)
    if role:
        bind(user, role, tenant)
    return user


def _login(page, url: str, username: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")


def _live(page) -> None:
    page.wait_for_selector("#live-status.on", timeout=15_000)


def test_login_and_see_the_platform_overview(page, live_server_url, ref_workers, tenant_keys):
    from tests.factories import bind

    admin = _user("ops", None, None)
    bind(admin, "platform.admin", None)
    _login(page, live_server_url, "ops")
    page.wait_for_url(re.compile(r".*/platform/$"))
    assert page.locator("h1").inner_text() == "Platform overview"
    assert page.locator("#tenants-table").inner_text().lower().count("gw-") >= 2
    _live(page)
    page.screenshot(path=str(SHOTS / "platform-overview.png"), full_page=True)
    page.goto(f"{live_server_url}/platform/workers/")
    assert "gw0" in page.locator("#workers-table").inner_text()
    page.screenshot(path=str(SHOTS / "workers.png"), full_page=True)


def test_gateway_traffic_moves_hit_rate_and_spend_live(
    page, live_server_url, ref_workers, tenant_keys
):
    from billing.services.prices import pool_price_create
    from billing.services.usage import usage_flush
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
    acme = tenant_keys["gw-acme"]
    _user("acme-admin", "tenant.admin", acme["tenant"])
    _login(page, live_server_url, "acme-admin")
    page.wait_for_url(re.compile(r".*/t/gw-acme/$"))
    _live(page)
    assert page.locator("#tile-live-requests").inner_text() == "0"
    client = openai.OpenAI(base_url=f"{live_server_url}/v1", api_key=acme["key"], max_retries=0)
    prompt = "Explain our refund policy to a customer, step by step. " * 10
    for _ in range(4):
        client.chat.completions.create(
            model=REF_MODEL, max_tokens=2, messages=[{"role": "user", "content": prompt}]
        )
    page.wait_for_function(
        "Number(document.getElementById('tile-live-requests').textContent) >= 4", timeout=15_000
    )
    points = page.evaluate("window.Chart.getChart('hit-chart').data.datasets[2].data")
    assert any(p and p > 0 for p in points), points  # the delivered hit rate rose
    usage_flush()
    page.wait_for_function(
        "document.getElementById('tile-spent').textContent !== '$0.0000'", timeout=15_000
    )
    page.screenshot(path=str(SHOTS / "tenant.png"), full_page=True)


def test_create_a_cache_and_watch_it_go_pending_to_active(
    page, live_server_url, ref_workers, tenant_keys
):
    from celery.contrib.testing.worker import start_worker

    from controlplane.celery import app

    acme = tenant_keys["gw-acme"]
    _user("acme-admin", "tenant.admin", acme["tenant"])
    _login(page, live_server_url, "acme-admin")
    page.wait_for_url(re.compile(r".*/t/gw-acme/$"))
    _live(page)
    create = page.evaluate("""async () => {
        const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
        const r = await fetch('/api/v1/tenants/gw-acme/caches', {method: 'POST',
          headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},
          body: JSON.stringify({name: 'faq', provider: 'vllm', model: 'test/ref-tiny',
            content: {system_instruction: 'You answer from the Acme FAQ. '.repeat(20)}})});
        return [r.status, await r.json()];
    }""")
    assert create[0] == 202, create
    row = page.locator(f"tr[data-cache='{create[1]['cache']}'] [data-role=state]")
    row.wait_for(timeout=10_000)
    assert row.inner_text() == "pending"
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        page.wait_for_function(
            f"document.querySelector(\"tr[data-cache='{create[1]['cache']}'] [data-role=state]\")"
            ".textContent === 'active'",
            timeout=30_000,
        )
    page.goto(f"{live_server_url}/t/gw-acme/caches/{create[1]['cache']}/")
    assert page.locator("#cache-state").inner_text() == "active"
    assert "creating" in page.locator("#timeline").inner_text()
    page.screenshot(path=str(SHOTS / "cache.png"), full_page=True)


def test_a_viewer_cannot_evict(page, live_server_url, ref_workers, tenant_keys):
    from caches.models import CacheObject

    acme = tenant_keys["gw-acme"]
    cache = CacheObject.objects.create(
        tenant=acme["tenant"],
        name="kb",
        provider="vllm",
        model=REF_MODEL,
        content={},
        content_digest="a" * 64,
        ttl_seconds=600,
        state="active",
    )
    _user("acme-viewer", "tenant.viewer", acme["tenant"])
    _login(page, live_server_url, "acme-viewer")
    page.goto(f"{live_server_url}/t/gw-acme/caches/{cache.pk}/")
    assert page.locator("#btn-evict").count() == 0
    status = page.evaluate(f"""async () => {{
        const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
        const r = await fetch('/api/v1/tenants/gw-acme/caches/{cache.pk}/evict',
          {{method: 'POST', headers: {{'X-CSRFToken': csrf}}}});
        return r.status; }}""")
    assert status == 403
    cache.refresh_from_db()
    assert cache.state == "active"


def test_a_user_of_tenant_b_sees_nothing_of_tenant_a(
    page, live_server_url, ref_workers, tenant_keys
):
    _user("globex-admin", "tenant.admin", tenant_keys["gw-globex"]["tenant"])
    _login(page, live_server_url, "globex-admin")
    page.wait_for_url(re.compile(r".*/t/gw-globex/$"))
    options = page.locator("#tenant-switcher option").all_inner_texts()
    assert not any("acme" in o.lower() for o in options)
    response = page.goto(f"{live_server_url}/t/gw-acme/")
    assert response.status == 404
    api = page.goto(f"{live_server_url}/api/v1/tenants/gw-acme/console/summary")
    assert api.status == 404
