"""Refresh the README's console screenshots from a running Cacheplane (explicitly: the test
suite never writes them).

    cacheplane screenshots --url http://127.0.0.1:8000 --username admin --password ...
    python -m frontend.screenshots ...   # the same, without Django

Drives Debian's Chromium with Playwright, logs in, waits for live data and writes one PNG
per page into ``frontend/screenshots/``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page

OUT = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = "/usr/bin/chromium"


def _shoot(page: Page, url: str, path: Path, *, settle_ms: int) -> None:
    page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_timeout(settle_ms)  # let live ticks and charts draw
    page.screenshot(path=str(path), full_page=True)


def screenshots(
    *, url: str, username: str, password: str, tenant: str, out: Path, settle_ms: int = 8000
) -> list[Path]:
    """Log in and capture the main pages; returns the files written."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.goto(f"{url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state("load")
        pages = {
            "platform-overview": "/platform/",
            "platform-tenants": "/platform/tenants/",
            "workers": "/platform/workers/",
            "prices": "/platform/prices/",
            "tenant": f"/t/{tenant}/",
            "access": f"/t/{tenant}/access/",
            "keys": f"/t/{tenant}/keys/",
            "budgets": f"/t/{tenant}/budgets/",
            "cache-new": f"/t/{tenant}/caches/new/",
        }
        charts = {"platform-overview", "tenant", "workers"}
        for name, path in pages.items():
            target = out / f"{name}.png"
            # Pages with charts wait for a few live ticks; the others only for their data.
            _shoot(page, url + path, target, settle_ms=settle_ms if name in charts else 1500)
            written.append(target)
        page.goto(f"{url}/t/{tenant}/")
        link = page.locator("#caches-table a").first
        if link.count():
            href = link.get_attribute("href") or ""
            if re.match(r"^/t/[^/]+/caches/[0-9a-f-]+/$", href):
                target = out / "cache.png"
                _shoot(page, url + href, target, settle_ms=settle_ms)
                written.append(target)
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cacheplane screenshots", description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password", required=True)
    parser.add_argument("--tenant", default="acme-legal")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for path in screenshots(
        url=args.url.rstrip("/"),
        username=args.username,
        password=args.password,
        tenant=args.tenant,
        out=args.out,
    ):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
