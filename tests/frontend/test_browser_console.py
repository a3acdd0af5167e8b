"""Issue 27 in a real browser (Playwright driving Debian's Chromium): one budget figure
everywhere while a stream is in flight, Extend keeping the cache's actions, the one-time
key reveal surviving a reload without a second key, a seeded price corrected as it is,
and a form posted after the session expired resumed after logging in again; an edit shown as
a diff in a budget's History and in a person's platform History. Every page
is checked for console errors and with axe (``ConsolePage.check``)."""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.conftest import REF_MODEL
from tests.frontend.browser_helpers import (
    acme_admin_at,
    acme_with_admin,
    cache_row_create,
    default_pool_priced,
    platform_admin_create,
    user_create,
)
from tests.frontend.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
DOLLAR = 1_000_000


def _shown(console, selector: str) -> dict[str, str]:
    return {
        k: console.locator(f"{selector} .budget-{k}").inner_text()
        for k in ("spent", "reserved", "remaining", "committed")
    }


def test_the_same_budget_figure_shows_on_three_pages_and_the_api_while_a_stream_is_in_flight(
    console, ref_workers, tenant_keys
) -> None:
    from billing.services import budget_create, budget_reserve, budget_settle
    from tests.billing.ledger_support import book_micros
    from tests.factories import actor_for

    acme = tenant_keys["gw-acme"]
    tenant, admin = acme["tenant"], acme["admin"]
    default_pool_priced()
    budget = budget_create(
        actor=actor_for(admin), tenant=tenant, name="monthly", period="month", limit_micros=DOLLAR
    )
    settled = budget_reserve(
        tenant=tenant, principal=admin, estimate_micros=100_000, request_id="earlier"
    )
    # The figures: 65,372 µ$ booked through the ledger (spend follows it), the
    # request's hold then settled (it spends nothing itself).
    book_micros(tenant, 65_372, principal=admin)
    budget_settle(reservation=settled, actual_micros=65_372)
    budget_reserve(  # a cache's storage hold, reserved in PostgreSQL
        tenant=tenant, principal=admin, estimate_micros=35_911, request_id="cache-hold"
    )
    user_create("acme-owner", "tenant.admin", tenant)
    console.login("acme-owner")
    client = openai.OpenAI(base_url=f"{console.base}/v1", api_key=acme["key"], max_retries=0)
    stream = client.chat.completions.create(
        model=REF_MODEL,
        max_tokens=600,
        stream=True,
        messages=[{"role": "user", "content": "Tell a long story about budgets. " * 5}],
    )
    chunks = iter(stream)
    next(chunks)  # the stream is under way: its hold is taken
    # Keep it in flight while the pages are read: the workers stop stepping (vLLM's
    # "pause, keep requests"), so its hold stays open and the figures stay still.
    for worker in ref_workers:
        worker.engine.call(lambda core: setattr(core, "sleeping", True))
    try:
        api = json.loads(
            console.evaluate(
                f"async () => JSON.stringify(await (await fetch("
                f"'/api/v1/tenants/{tenant.slug}/budgets/{budget.pk}')).json())"
            )
        )["current_period"]
        stream_hold = api["reserved_micros"] - 35_911
        # Reserved is what is in flight: the cache's storage hold (PostgreSQL) and the
        # stream's hold (the gateway's, in Redis), the sum the hard limit refuses on.
        assert stream_hold > 0
        assert (api["spent_micros"], api["remaining_micros"]) == (
            65_372,
            DOLLAR - 65_372 - api["reserved_micros"],
        )
        expected = {
            "spent": _usd(65_372),
            "reserved": _usd(api["reserved_micros"]),
            "remaining": _usd(api["remaining_micros"]),
            "committed": _usd(65_372 + api["reserved_micros"]),
        }
        console.go(f"/t/{tenant.slug}/budgets/")
        assert _shown(console, f"tr[data-budget='{budget.pk}']") == expected
        assert "spent + reserved" in console.locator("#alert-basis").inner_text()
        console.check()
        console.go(f"/t/{tenant.slug}/")
        row = f".budget[data-budget='{budget.pk}']"
        assert _shown(console, row) == expected
        console.wait_until("Number(document.getElementById('page').dataset.refreshed) >= 1")
        assert _shown(console, row) == expected  # the live tile, re-read over REST: the same
        console.check()
        console.go(f"/t/{tenant.slug}/caches/new/")
        console.fill("#cache-form [name=name]", "kb")
        console.select_option("#cache-form [name=provider]", "vllm")
        console.select_option("#cache-form [name=model]", REF_MODEL)
        console.fill("#cache-form [name=system_instruction]", "You answer from the FAQ. " * 20)
        console.click("#cache-form button[name=preview]")
        preview = console.locator("#preview-budgets li").inner_text()
        assert "monthly" in preview
        assert f"{expected['remaining']} remaining of $1.0000" in preview
        assert f"spent + reserved {expected['committed']}" in preview
        console.check()
    finally:
        for worker in ref_workers:
            worker.engine.call(lambda core: setattr(core, "sleeping", False))
    for _ in chunks:  # let the stream finish
        pass


def _usd(micros: int) -> str:
    """A micro-USD amount as the console prints it ($0.0654)."""
    return f"${micros / DOLLAR:.4f}"


def test_extend_keeps_the_cache_page_live_with_its_actions(console) -> None:

    tenant, _admin = acme_with_admin()
    cache = cache_row_create(tenant, name="kb", state="active", digest="a")
    console.login("acme-admin")
    console.go(f"/t/acme/caches/{cache.pk}/")
    console.fill("[name=extend_by]", "600")
    console.click("#btn-extend")
    assert "Extending kb" in console.locator(".flash").inner_text()
    console.wait_for_selector("#live-status.on", timeout=15_000)
    # The extend operation's first step, as its task takes it (the provider call follows):
    # the cache goes refreshing and the page hears it live. From a thread of its own, as
    # in a Celery worker (Playwright's loop on this thread refuses the after-commit push).
    import threading

    from django.db import connection, transaction

    from caches.services.locks import cache_lock
    from caches.services.transitions import cache_transition
    from tenants.actor import Actor

    def refresh() -> None:
        try:
            with transaction.atomic():
                cache_transition(
                    cache=cache_lock(cache_id=cache.pk),
                    to_state="refreshing",
                    actor=Actor.system("test"),
                )
        finally:
            connection.close()

    worker = threading.Thread(target=refresh)
    worker.start()
    worker.join(timeout=60)
    console.wait_until("document.getElementById('cache-state').textContent === 'refreshing'")
    console.wait_until("Number(document.getElementById('page').dataset.refreshed) >= 2")
    assert console.locator("#cache-actions").count() == 1  # still there after the live re-read
    assert console.locator("#cache-countdown").inner_text() != "ended"
    assert console.locator("#btn-extend").is_visible()
    console.check()


def test_a_reload_of_the_key_reveal_shows_no_secret_and_creates_no_second_key(console) -> None:
    from tenants.models import ApiKey

    tenant = acme_admin_at(console, "/t/acme/keys/")
    console.fill("#key-form [name=name]", "checkout")
    console.click("#key-form button[type=submit]")
    secret = console.locator("#new-key").input_value()
    key = ApiKey.objects.get(tenant=tenant, name="checkout")
    assert secret.startswith(key.prefix)
    assert re.search(r"/t/acme/keys/\?revealed=", console.url)  # a GET, after a redirect
    console.check()
    console.reload()
    assert console.locator("#new-key").count() == 0 and secret not in console.content()
    assert console.locator("#reveal-gone").is_visible()
    assert ApiKey.objects.filter(tenant=tenant, name="checkout").count() == 1
    console.check()


def test_a_seeded_price_is_corrected_in_the_browser_keeping_its_long_source(console) -> None:

    ops = platform_admin_create()
    from billing.services.prices import model_price_create
    from tests.factories import actor_for

    # As the seeded prices quote their published pages: long, over lines, with "->".
    quoted = (
        "cloud.google.com/vertex-ai/generative-ai/pricing (2026 list) -> input 0.30, "
        "cached input 0.03, output 2.50 USD per 1M tokens;\nstorage 1.00 USD per 1M tokens "
        "per hour. " * 4
    )[:515]
    price = model_price_create(
        actor=actor_for(ops),
        provider="vertex",
        model="gemini-2.5-flash",
        rates={
            "input_per_mtok": "0.30",
            "cached_input_per_mtok": "0.03",
            "output_per_mtok": "2.50",
            "storage_per_mtok_hour": "1.00",
        },
        source=quoted,
    )
    assert len(price.source) == 515
    console.login("ops")
    console.go("/platform/prices/")
    console.click(f"tr[data-price='{price.pk}'] a:has-text('Correct')")
    assert console.locator("#correct-form [name=fix-source]").input_value() == price.source
    console.fill("#correct-form [name=fix-note]", "re-checked the published page")
    console.click("#correct-form button[type=submit]")
    assert "corrected" in console.locator(".flash").inner_text()
    price.refresh_from_db()
    fixed = price.superseded_by  # the correction replaced this version
    assert fixed is not None and fixed.source == price.source
    console.check()


def test_a_form_posted_after_the_session_expired_is_resumed_after_logging_in(console) -> None:
    from django.contrib.sessions.models import Session

    from billing.models import Budget

    acme_admin_at(console, "/t/acme/budgets/")
    console.fill("#budget-form [name=name]", "quarterly")
    console.fill("#budget-form [name=limit_usd]", "12.5")
    console.fill("#budget-form [name=thresholds]", "50, 90")
    console.uncheck("#budget-form [name=hard_limit]")
    Session.objects.all().delete()  # the session expires while the form is open
    console.click("#budget-form button[type=submit]")
    console.wait_for_url(re.compile(r".*/login/\?next=/t/acme/budgets/$"))
    assert not Budget.objects.all_tenants().exists()
    console.fill("input[name=username]", "acme-admin")
    console.fill("input[name=password]", PASSWORD)
    console.click("button[type=submit]")
    console.wait_for_url(re.compile(r".*/t/acme/budgets/$"))  # the page, not an empty 405
    assert "session had expired" in console.locator("#resume-notice").inner_text()
    assert console.locator("#budget-form [name=name]").input_value() == "quarterly"
    assert console.locator("#budget-form [name=thresholds]").input_value() == "50, 90"
    assert not console.locator("#budget-form [name=hard_limit]").is_checked()
    console.check()
    console.click("#budget-form button[type=submit]")
    budget = Budget.objects.all_tenants().get(name="quarterly")
    assert (budget.limit_micros, budget.thresholds, budget.hard_limit) == (
        12_500_000,
        [50, 90],
        False,
    )


def test_regenerating_a_key_shows_its_new_secret_once_and_a_reload_makes_no_third_key(
    console,
) -> None:
    from tenants.models import ApiKey
    from tenants.services import keys
    from tests.factories import actor_for

    tenant, admin = acme_with_admin()
    old = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="checkout")
    console.login("acme-admin")
    console.go("/t/acme/keys/")
    console.check()
    console.locator(f"tr[data-key='{old.key.pk}'] button.key-rotate").click()
    secret = console.locator("#new-key").input_value()
    assert secret != old.plaintext
    fresh = ApiKey.objects.get(tenant=tenant, name="checkout", revoked_at__isnull=True)
    assert secret.startswith(fresh.prefix) and fresh.pk != old.key.pk
    assert "revoked" in console.locator(f"tr[data-key='{old.key.pk}']").inner_text()
    console.check()
    console.reload()
    assert console.locator("#new-key").count() == 0 and secret not in console.content()
    assert ApiKey.objects.filter(tenant=tenant, name="checkout").count() == 2  # old + new
    console.check()


def test_an_edit_shows_as_a_diff_in_the_budgets_history(console) -> None:
    from billing.services import budget_create
    from tests.factories import actor_for

    tenant, admin = acme_with_admin()
    budget = budget_create(
        actor=actor_for(admin), tenant=tenant, name="monthly", period="month", limit_micros=DOLLAR
    )
    console.login("acme-admin")
    console.go("/t/acme/budgets/")
    edit = console.locator("details", has_text="Edit “monthly”")
    edit.locator("summary").click()
    prefix = f"b{budget.pk.hex[:8]}"
    edit.locator(f"[name={prefix}-limit_usd]").fill("2.5")
    edit.locator("button", has_text="Save").first.click()
    assert "saved" in console.locator(".flash").inner_text()
    console.click(f"tr[data-budget='{budget.pk}'] a.history-link")
    console.wait_for_url(re.compile(rf".*/t/acme/history/budget/{budget.pk}/$"))
    row = console.locator("#history-table tr.diff-row[data-field='limit_micros']").first
    assert row.locator(".diff-before").inner_text() == "1000000"
    assert row.locator(".diff-after").inner_text() == "2500000"
    update = console.locator("#history-table tr[data-event]", has_text="billing.budget.update")
    assert "acme-admin" in update.inner_text()  # the actor, by name, linked
    assert (
        update.locator("a", has_text="acme-admin")
        .get_attribute("href")
        .startswith("/t/acme/history/principal/")
    )
    console.check()


def test_disabling_a_person_shows_as_a_diff_in_their_platform_history(console) -> None:
    """The people table and a person's sessions page link to the person's History, on
    the platform (``/platform/history/principal/…``), checked with axe."""
    platform_admin_create("ops")
    carol = user_create("carol", None, None)
    console.login("ops")
    console.go("/platform/tenants/")
    console.click("tr[data-person='carol'] button:has-text('Disable')")  # confirmed
    console.wait_for_load_state()
    assert "disabled" in console.locator("tr[data-person='carol']").inner_text()
    console.click("tr[data-person='carol'] a.history-link")
    console.wait_for_url(re.compile(rf".*/platform/history/principal/{carol.pk}/$"))
    row = console.locator("#history-table tr.diff-row[data-field='is_active']").first
    assert row.locator(".diff-before").inner_text() == "True"
    assert row.locator(".diff-after").inner_text() == "False"
    disable = console.locator(
        "#history-table tr[data-event]", has_text="identity.principal.disable"
    )
    assert disable.locator("a", has_text="ops").count() == 1  # the actor, linked by name
    console.check()
    console.go(f"/platform/people/{carol.pk}/sessions/")
    console.click("#history-link")
    console.wait_for_url(re.compile(rf".*/platform/history/principal/{carol.pk}/$"))
    console.check()


def test_the_platform_audit_page_filters_by_actor_action_and_outcome(console) -> None:
    from billing.services import budget_create
    from tests.factories import actor_for

    tenant, admin = acme_with_admin()
    budget_create(
        actor=actor_for(admin), tenant=tenant, name="monthly", period="month", limit_micros=DOLLAR
    )
    platform_admin_create()
    console.login("ops")
    console.go("/platform/audit/")
    console.check()
    console.fill("#pa-actor", "acme-admin")
    console.fill("#pa-action", "billing.*")
    console.select_option("#pa-outcome", "success")
    console.click("#platform-audit-filters button[type=submit]")
    console.wait_for_url(re.compile(r".*/platform/audit/\?actor=acme-admin.*"))
    rows = console.locator("#platform-audit-table > tbody > tr[data-event]")
    assert rows.count() == 1 and "billing.budget.create" in rows.first.inner_text()
    assert "acme" in rows.first.inner_text()  # the tenant, by slug
    assert console.locator("#pa-actor").input_value() == "acme-admin"  # filters kept
    console.check()
    console.select_option("#pa-outcome", "denied")
    console.click("#platform-audit-filters button[type=submit]")
    assert "No events." in console.locator("#platform-audit-table").inner_text()
    console.check()
