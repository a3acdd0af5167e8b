"""vLLM's render endpoints on the reference worker: what routers hash, as the engine sees it."""

from __future__ import annotations

import httpx

from workers.engine.hashing import block_hash_chain, event_hash
from workers.request_hashing import REFERENCE_SPEC, request_block_hashes


def test_chat_render_returns_the_engines_token_ids_and_salt(worker):
    body = {
        "model": "test/ref-tiny",
        "messages": [{"role": "user", "content": "hello " * 20}],
        "cache_salt": "tenant-a",
        "max_tokens": 3,
    }
    rendered = httpx.post(f"{worker.base_url}/v1/chat/completions/render", json=body).json()
    tokens = httpx.post(f"{worker.base_url}/tokenize", json=body).json()["tokens"]
    assert rendered["token_ids"] == tokens
    assert rendered["cache_salt"] == "tenant-a"
    assert rendered["sampling_params"]["max_tokens"] == 3
    # The gateway's own hashing (no engine import) predicts the same blocks.
    chain = [event_hash(d) for d in block_hash_chain(rendered["token_ids"], cache_salt="tenant-a")]
    predicted = request_block_hashes(body, kind="chat", spec=REFERENCE_SPEC, salt="tenant-a")
    assert chain and predicted == chain


def test_completions_render_returns_one_entry_per_prompt(worker):
    body = {"model": "test/ref-tiny", "prompt": ["abc", "defg"]}
    rendered = httpx.post(f"{worker.base_url}/v1/completions/render", json=body).json()
    assert [len(r["token_ids"]) for r in rendered] == [4, 5]  # BOS + bytes


def test_render_rejects_what_generation_rejects(worker):
    response = httpx.post(
        f"{worker.base_url}/v1/chat/completions/render",
        json={"model": "test/ref-tiny", "messages": []},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"
