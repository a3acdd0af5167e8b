"""The cache-breakpoint autopilot through the gateway (Anthropic SDK → Cacheplane → the
local Anthropic server): placement from observed reuse, the client's own breakpoints
win, the model's minimum, the per-tenant switch; OpenAI's prompt_cache_key."""

from __future__ import annotations

import pytest

from tests.providers.support import D, anthropic_client, booked, new_request_id, openai_client

pytestmark = pytest.mark.django_db(transaction=True)
SONNET = "claude-sonnet-4-5"


def _turns(client, *, system: str, turns: int) -> list[str]:
    ids, messages = [], []
    for n in range(turns):
        messages = [*messages, {"role": "user", "content": D(10 + n)}]
        rid = new_request_id()
        answer = client.messages.with_raw_response.create(
            model=SONNET,
            max_tokens=50,
            system=system,
            messages=messages,
            extra_headers={"x-request-id": rid},
        )
        ids.append((rid, answer.headers.get("x-cacheplane-autopilot")))
        messages.append({"role": "assistant", "content": "tok tok tok tok "})
    return ids


def test_the_second_turn_reads_what_the_autopilot_wrote_on_the_first(live_server_url, hosted):
    client = anthropic_client(live_server_url, hosted["key"])
    (first, decided1), (second, decided2) = _turns(client, system=D(1200), turns=2)
    assert decided1 == "end:5m"
    assert decided2 == "system:5m,end:5m"
    # turn 1: system 1,200 + user 10 written at the end (5 minutes)
    row1 = booked(first)
    assert (row1.cache_write_5m_tokens, row1.cached_read_tokens) == (1210, 0)
    # turn 2 reads the 1,210 (the 20-block lookback) and writes its 4 + 11 new tokens:
    # 1,210 × 300 + 15 × 3,750 + 4 × 15,000 = 363,000 + 56,250 + 60,000
    row2 = booked(second)
    assert (row2.cached_read_tokens, row2.cache_write_5m_tokens) == (1210, 15)
    assert row2.cost_nanos == 479_250
    # The decision reaches the ledger (the request log shows it), not only the header.
    assert (row1.autopilot, row2.autopilot) == (decided1, decided2)
    sent = hosted["anthropic"].received[-1]["body"]
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}


def test_switched_off_for_the_tenant_nothing_is_placed_and_nothing_is_read(live_server_url, hosted):
    from gateway.provider_credentials import provider_credential_get, provider_credential_update

    credential = provider_credential_get(tenant=hosted["tenant"], provider="anthropic")
    provider_credential_update(credential=credential, actor=hosted["actor"], cache_autopilot=False)
    client = anthropic_client(live_server_url, hosted["key"])
    (_, decided1), (second, decided2) = _turns(client, system=D(1200), turns=2)
    assert decided1 is None and decided2 is None
    assert booked(second).cached_read_tokens == 0
    assert booked(second).autopilot == ""
    assert all("cache_control" not in str(r["body"]) for r in hosted["anthropic"].received)


def test_the_clients_own_breakpoints_win(live_server_url, hosted):
    client = anthropic_client(live_server_url, hosted["key"])
    system = [{"type": "text", "text": D(1100), "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        answer = client.messages.with_raw_response.create(
            model=SONNET,
            max_tokens=20,
            system=system,
            messages=[{"role": "user", "content": "hi!!"}],
        )
    assert answer.headers["x-cacheplane-autopilot"] == "client"
    for received in hosted["anthropic"].received:
        assert received["body"]["system"] == system
        assert received["body"]["messages"] == [{"role": "user", "content": "hi!!"}]


def test_no_breakpoint_below_the_models_minimum(live_server_url, hosted):
    client = anthropic_client(live_server_url, hosted["key"])
    decisions = [d for _, d in _turns(client, system=D(500), turns=3)]
    # 500 + ~30 tokens stay under Sonnet 4.5's 1,024: no breakpoint is ever placed
    assert decisions == ["none:no_reuse"] * 3
    assert all("cache_control" not in str(r["body"]) for r in hosted["anthropic"].received)


def test_openai_gets_one_prompt_cache_key_per_tenant_and_system_prompt(live_server_url, hosted):
    chat = openai_client(live_server_url, hosted["key"]).chat.completions
    for user in ("a" * 8, "b" * 8):
        chat.create(
            model="gpt-4o",
            messages=[{"role": "system", "content": D(50)}, {"role": "user", "content": user}],
        )
    chat.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": D(51)}, {"role": "user", "content": "c"}],
    )
    chat.create(
        model="gpt-4o", messages=[{"role": "user", "content": "d"}], prompt_cache_key="mine"
    )
    keys = [r["body"]["prompt_cache_key"] for r in hosted["openai"].received]
    assert keys[0] == keys[1] != keys[2]
    assert keys[0].startswith("cp-") and keys[3] == "mine"
