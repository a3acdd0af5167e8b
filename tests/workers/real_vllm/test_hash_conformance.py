"""Our block hashes are vLLM's: 100 salted and unsalted prompts against real KV events.

For two servers (``sha256_cbor`` with ``PYTHONHASHSEED=0``, and vLLM's defaults: ``sha256``
without PYTHONHASHSEED), the gateway's
own path (``workers.hf_tokenizer`` on the model's tokenizer.json and chat template, then
``workers.request_hashing``) predicts every full block's hash; the prediction must be in
the server's ``BlockStored`` events, every one of them (100 %). A negative control shows
the test can tell: the pre-0.32 bare salt form matches none of the salted prompts.
"""

from __future__ import annotations

import httpx
import pytest

from tests.workers.real_vllm.support import long_text, replay_events, stored_hashes
from workers.hash_check import check_first_blocks
from workers.hash_config import VLLM_DEFAULT_SEED
from workers.hf_tokenizer import load_tokenizer
from workers.request_hashing import HashSpec, block_hashes

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e]


def _bodies(count: int = 100) -> list[tuple[str, dict, str | None]]:
    out = []
    for i in range(count):
        salt = f"tenant-{i % 7}-salt" if i % 2 else None
        text = long_text(i)
        if i % 4 < 2:
            body: dict = {"model": "tiny", "prompt": text, "max_tokens": 1}
            kind = "completion"
        else:
            body = {
                "model": "tiny",
                "messages": [
                    {"role": "system", "content": long_text(1000 + i % 3)},
                    {"role": "user", "content": text},
                ],
                "max_tokens": 1,
            }
            kind = "chat"
        if salt:
            body["cache_salt"] = salt
        out.append((kind, body, salt))
    return out


def test_our_hashes_match_real_vllm_kv_events_for_100_prompts(
    vllm_pair, vllm_default_hash, tiny_model
):
    tokenize = load_tokenizer(str(tiny_model))
    for server in (vllm_pair[0], vllm_default_hash):
        # Unset PYTHONHASHSEED: vLLM 0.32's fixed default seed (workers.hash_config).
        seed = server.hash_seed if server.hash_seed is not None else VLLM_DEFAULT_SEED
        predicted: list[tuple[str | None, list[int], list[int]]] = []
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            for kind, body, salt in _bodies():
                path = "/v1/completions" if kind == "completion" else "/v1/chat/completions"
                reply = client.post(path, json=body)
                assert reply.status_code == 200, reply.text
                ids = tokenize(body, kind)
                assert ids is not None
                # Same tokens as vLLM's own tokenizer and chat template.
                assert reply.json()["usage"]["prompt_tokens"] == len(ids)
                ours = block_hashes(
                    ids, salt=salt, block_size=128, hash_seed=seed, algo=server.hash_algo
                )
                bare = block_hashes(
                    ids,
                    salt=salt,
                    block_size=128,
                    hash_seed=seed,
                    algo=server.hash_algo,
                    salt_form="bare",
                )
                predicted.append((salt, ours, bare))
        events = replay_events(server)
        stored = stored_hashes(events)
        total = sum(len(ours) for _, ours, _ in predicted)
        matched = sum(h in stored for _, ours, _ in predicted for h in ours)
        assert total >= 200  # two or more full blocks per prompt
        assert matched == total, f"{server.hash_algo}: {matched}/{total} block hashes matched"
        # The control: the bare salt (earlier releases) matches no salted prompt's blocks.
        assert not any(h in stored for salt, _, bare in predicted if salt for h in bare)
        # The indexer's own check, on the same events, agrees.
        spec = HashSpec(tokenizer=str(tiny_model), block_size=128, algo=server.hash_algo, seed=seed)
        ok, bad = check_first_blocks(events, spec)
        assert ok > 0 and bad == 0  # every chain start the events carry in full
        wrong_seed = HashSpec(tokenizer="", block_size=128, algo=server.hash_algo, seed="1")
        assert check_first_blocks(events, wrong_seed)[0] == 0
