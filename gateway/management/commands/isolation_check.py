"""``cacheplane isolation-check``: prove tenant isolation of prefix caches on a live gateway.

Sends one fresh prompt (a random nonce makes it new to every worker) twice with tenant A's
key and once with tenant B's. Passes only when A's repeat reports ``cached_tokens > 0``
(caching works) and B's identical prompt reports 0 (B cannot reuse A's blocks, so it
cannot time them either). Exits non-zero on failure.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Prove that identical prompts of two tenants never share cached blocks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True, help="gateway base URL (without /v1)")
        parser.add_argument("--model", required=True)
        parser.add_argument("--key-a", required=True, help="API key of tenant A")
        parser.add_argument("--key-b", required=True, help="API key of tenant B")
        parser.add_argument("--blocks", type=int, default=8, help="prompt length in 64-char blocks")

    def handle(self, *args: Any, **options: Any) -> None:
        nonce = secrets.token_hex(8)
        prompt = f"[isolation-check {nonce}] " + "The quick brown fox jumps. " * (
            options["blocks"] * 3
        )
        url = options["url"].rstrip("/") + "/v1/chat/completions"

        def cached(key: str) -> int:
            response = httpx.post(
                url,
                timeout=60,
                headers={"Authorization": f"Bearer {key}", "X-Session-Id": f"isolation-{nonce}"},
                json={
                    "model": options["model"],
                    "max_tokens": 1,
                    "messages": [{"role": "user", "content": prompt}],
                },
            )
            if response.status_code != 200:
                raise CommandError(f"gateway answered {response.status_code}: {response.text}")
            details = response.json()["usage"].get("prompt_tokens_details") or {}
            return int(details.get("cached_tokens") or 0)

        first_a = cached(options["key_a"])
        second_a = cached(options["key_a"])
        b = cached(options["key_b"])
        self.stdout.write(
            f"tenant A first={first_a} repeat={second_a}; cross-tenant cached_tokens={b}"
        )
        if second_a <= 0:
            raise CommandError("FAIL: A's repeated prompt was not served from cache")
        if b != 0:
            raise CommandError(f"FAIL: tenant B reused {b} cached tokens of tenant A's prompt")
        self.stdout.write("PASS: caching works within a tenant and never across tenants")
