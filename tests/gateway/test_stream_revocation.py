"""A stream already running when its key is revoked stops within the revocation bound
(issue 23, What to build 5), and what it streamed is booked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import openai
import pytest

from tests.gateway.conftest import MODEL

BOUND_SECONDS = 5.0  # docs/gateway/budgets-and-rate-limits.md: the revocation bound


def _stream(live_server_url: str, key: str, max_tokens: int):
    client = openai.OpenAI(base_url=f"{live_server_url}/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a long story about caches."}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Request-Id": "revoked-mid-stream"},
    )


def _revoke(entry) -> None:
    from tenants.services import keys
    from tests.factories import actor_for

    keys.api_key_revoke(
        actor=actor_for(entry["admin"]), tenant=entry["tenant"], key_id=str(entry["key_row"].pk)
    )


def _suspend(entry) -> None:
    from tenants.models import TenantState
    from tenants.services.tenants import tenant_set_state
    from tests.factories import actor_for

    tenant_set_state(actor=actor_for(None), tenant=entry["tenant"], state=TenantState.SUSPENDED)


@pytest.mark.parametrize(
    ("end", "code"), [(_revoke, "api_key_revoked"), (_suspend, "tenant_suspended")]
)
def test_a_running_stream_ends_within_the_bound_and_is_booked(
    live_server_url, ref_workers, tenant_keys, settings, end, code
):
    from tests.gateway.support import usage_row_once_booked

    # Faster than the 2 s default so the reference worker is still generating when the
    # re-check runs; the bound itself is asserted with the real 5 s.
    settings.CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS = 0.05
    entry = tenant_keys["gw-acme"]
    max_tokens = 900
    chunks = iter(_stream(live_server_url, entry["key"], max_tokens))
    first = next(chunks)
    assert first.choices  # streaming has started
    end(entry)
    ended_at = time.monotonic()
    streamed = 1
    with pytest.raises(openai.APIError) as stopped:
        for chunk in chunks:
            streamed += bool(chunk.choices)
    assert time.monotonic() - ended_at < BOUND_SECONDS
    assert stopped.value.body["code"] == code
    row = usage_row_once_booked("revoked-mid-stream")
    assert str(row.tenant_id) == str(entry["tenant"].pk)
    # Booked through the normal closing path from the worker's own count: at least every
    # token streamed (the first chunk carries only the role), never the whole allowance.
    assert streamed - 1 <= row.output_tokens < max_tokens
    assert row.prompt_tokens > 0 and row.status == "client_disconnect"


async def _silent_upstream() -> AsyncIterator[bytes]:
    yield b'data: {"choices":[]}\n\n'
    await asyncio.sleep(3600)  # the upstream stalls
    yield b"never"


@pytest.mark.asyncio
async def test_a_revocation_interrupts_a_silent_upstream(monkeypatch, settings):
    from gateway import identity, pipeline
    from gateway.adapters.base import Upstream
    from gateway.books import Books
    from gateway.errors import GatewayError

    settings.CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS = 0.02
    revoked = GatewayError(401, "api_key_revoked", "The API key has been revoked.")
    monkeypatch.setattr(identity, "identities_refused", lambda keys: dict.fromkeys(keys, revoked))
    books = Books(closed=True)  # nothing to settle in this unit test
    books.call = SimpleNamespace(
        identity=SimpleNamespace(key_id="k1"), kind="chat", extra={}, cut_cost_known=True
    )  # type: ignore[assignment]
    answer = Upstream(events=_silent_upstream())
    relayed = [event async for event in pipeline._relay(answer, books)]
    assert relayed[0] == b'data: {"choices":[]}\n\n'
    assert b'"code":"api_key_revoked"' in relayed[-1] and len(relayed) == 2
    assert asyncio.current_task().cancelling() == 0  # its own cancellation was absorbed


@pytest.mark.asyncio
async def test_a_client_leaving_still_cancels_the_relay(monkeypatch, settings):
    from gateway import identity, pipeline
    from gateway.adapters.base import Upstream
    from gateway.books import Books

    settings.CACHEPLANE_GATEWAY_STREAM_RECHECK_SECONDS = 0.02
    monkeypatch.setattr(identity, "identities_refused", lambda keys: {})
    books = Books(closed=True)
    books.call = SimpleNamespace(
        identity=SimpleNamespace(key_id="k2"), kind="chat", extra={}, cut_cost_known=True
    )  # type: ignore[assignment]

    async def consume() -> None:
        async for _ in pipeline._relay(Upstream(events=_silent_upstream()), books):
            pass

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.1)  # a few re-checks pass: the key is fine
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
