"""Browser fixtures: one Chromium per test session, a fresh context per test.

Debian's Chromium is required: without it these tests FAIL (CI installs it; see
``.ci/run``); they never skip. Every page a test opens is checked for console errors
(CSP violations included) and, through ``check_page``, for serious or critical
accessibility violations with axe-core (from npm, package.json).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CACHEPLANE_CHROMIUM", "/usr/bin/chromium")
AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
PASSWORD = "console-test-password-1"


# Module scope: the sync API runs an event loop on this thread while it lives, and later
# modules (Channels, asyncio tests) cannot start their own loops until it is stopped.
@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), (
        f"Debian's Chromium is required for the browser tests ({CHROMIUM} is missing): "
        "apt-get install -y chromium"
    )
    from playwright.sync_api import sync_playwright

    from controlplane.assets import ensure_assets

    # Playwright's sync API keeps an event loop running on this thread, which makes
    # Django refuse ORM calls from the test body; the test's own queries are synchronous
    # and safe, so the documented escape hatch applies (for the browser tests only).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    ensure_assets()
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield instance
        instance.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class ConsolePage:
    """A Playwright page that records console errors and accepts confirmations."""

    def __init__(self, page, base_url: str) -> None:
        self.page = page
        self.base = base_url
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", lambda d: d.accept())

    def __getattr__(self, name):
        return getattr(self.page, name)

    def go(self, path: str):
        return self.page.goto(self.base + path)

    def login(self, username: str, password: str = PASSWORD) -> None:
        self.go("/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()

    def wait_until(self, expression: str, *, timeout: float = 15.0) -> None:
        """Wait for a JS expression to be truthy.

        Playwright's ``wait_for_function`` evaluates its predicate with ``eval``, which
        the console's CSP (no 'unsafe-eval') refuses; ``evaluate`` goes through the
        DevTools protocol instead, so the condition is polled from here.
        """
        import time

        deadline = time.monotonic() + timeout
        while not self.page.evaluate(
            f"() => {{ try {{ return !!({expression}); }} catch (e) {{ return false; }} }}"
        ):
            assert time.monotonic() < deadline, f"timed out waiting for {expression}"
            self.page.wait_for_timeout(100)

    def check(self, *, axe: bool = True) -> None:
        """No console errors so far; no axe violations of any impact on this page."""
        self.page.wait_for_load_state("load")
        assert not self.errors, f"console errors on {self.page.url}: {self.errors}"
        if not axe:
            return
        if not self.page.evaluate("typeof window.axe !== 'undefined'"):
            self.page.evaluate(AXE.read_text())
        violations = self.page.evaluate(
            """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
              .map(v => ({id: v.id, impact: v.impact,
                          nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"""
        )
        assert not violations, f"axe on {self.page.url}: {violations}"


@pytest.fixture
def console(browser, live_server_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ConsolePage(context.new_page(), live_server_url)
    yield page
    context.close()


@pytest.fixture
def second_console(browser, live_server_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ConsolePage(context.new_page(), live_server_url)
    yield page
    context.close()
