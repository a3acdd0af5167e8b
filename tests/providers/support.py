"""Helpers of the hosted-provider tests: SDK clients of the gateway, the ledger row."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import anthropic
import openai

from tests.gateway.support import usage_row_once_booked


def anthropic_client(url: str, key: str) -> anthropic.Anthropic:
    """The official Anthropic SDK pointed at Cacheplane (its key sent as ``x-api-key``)."""
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def openai_client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def chat_content_read(stream: Iterable[Any], leave_after: int | None) -> int:
    """Read an OpenAI SDK chat stream, leaving after ``leave_after`` content chunks (None:
    to its end); the content chunks seen."""
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen == leave_after:
            break
    return seen


def new_request_id() -> str:
    return f"test-{uuid.uuid4().hex[:16]}"


def booked(request_id: str):
    return usage_row_once_booked(request_id)


def D(n: int) -> str:  # noqa: N802 (reads as the token count it stands for)
    """A text of exactly ``n`` tokens for the local servers (4 characters a token)."""
    return "abcd" * n


def fresh_shape(hosted: dict[str, Any]) -> None:
    """What a shape of its own test got from a fresh ``hosted`` fixture, short of a new
    database: the local servers as just started (no cache, no history, clock at wall
    time), an empty Redis database (autopilot history, rate limits, budget counters) and
    the gateway's process caches forgotten (``fresh_gateway``'s list, the API-key cache,
    the provider credentials)."""
    from controlplane import ops
    from gateway import budget, pricing, ratelimit
    from gateway.adapters import registry
    from gateway.app import prefix_index
    from gateway.directory import directory
    from gateway.identity import forget_identities
    from gateway.provider_credentials import forget
    from tenants.services.keys import key_cache

    for server in ("anthropic", "openai", "deepseek"):
        hosted[server].reset()
    ops.redis_client().flushdb()
    directory.forget()
    forget_identities()
    prefix_index.clear()
    for module in (budget, pricing, ratelimit, registry):
        module.forget()
    key_cache.clear()
    forget()


def assert_every_shape(
    shapes: Iterable[str], run: Callable[[str], tuple[Any, Any]], reset: Callable[[], None]
) -> None:
    """Each shape, in name order and after ``reset()``, through ``run(name)``, which sends
    it and returns ``(got, expected)``; fails naming every shape that did not get what it
    expected or raised (the rest still run, so one failure shows them all)."""
    failed = []
    names = sorted(shapes)
    for name in names:
        reset()
        try:
            got, expected = run(name)
        except Exception as exc:  # reported by shape name with the others, below
            failed.append(f"{name}: raised {exc!r:.400}")
            continue
        if got != expected:
            failed.append(f"{name}: got {got}, expected {expected}")
    assert not failed, f"{len(failed)} of {len(names)} shapes off:\n" + "\n".join(failed)
