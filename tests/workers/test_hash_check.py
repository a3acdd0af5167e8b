"""The KV indexer's hash check: block 0 recomputed from an event's own tokens and extra keys."""

from __future__ import annotations

import pytest

from workers.engine.hashing import block_hash_chain, event_extra_keys, event_hash
from workers.engine.kv_events import BlockStored, decode_batch, encode_batch
from workers.hash_check import check_first_blocks
from workers.request_hashing import HashSpec

TOKENS = list(range(256))


def _events(salt: str | None, encoding: str, **hashing) -> list[dict]:
    hashes = block_hash_chain(TOKENS, block_size=128, cache_salt=salt, **hashing)
    event = BlockStored(
        block_hashes=[event_hash(h) for h in hashes],
        parent_block_hash=None,
        token_ids=TOKENS,
        block_size=128,
        lora_id=None,
        medium="GPU",
        lora_name=None,
        extra_keys=[event_extra_keys(0, salt), None],  # published untagged, as vLLM 0.32
        group_idx=0,
        kv_cache_spec_kind="full_attention",
    )
    return decode_batch(encode_batch([event], encoding=encoding, ts=1.0, dp_rank=0))[1]


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_matching_hashes_are_counted_as_matching(encoding):
    assert check_first_blocks(_events(None, encoding), HashSpec("", 128)) == (1, 0)


def test_another_seed_or_algorithm_is_a_mismatch():
    events = _events(None, "map")
    assert check_first_blocks(events, HashSpec("", 128, seed="1")) == (0, 1)
    assert check_first_blocks(events, HashSpec("", 128, algo="sha256")) == (0, 1)
    # A later block of a chain (it has a parent) is not what the check recomputes.
    later = [{**events[0], "parent_block_hash": 5}]
    assert check_first_blocks(later, HashSpec("", 128, seed="1")) == (0, 0)


@pytest.mark.parametrize("algo", ["sha256_cbor", "sha256"])
def test_salted_chain_starts_are_checked_with_the_salt_retagged_as_vllm_hashes_it(algo):
    # vLLM 0.32 hashes ("cache_salt", salt) but publishes (salt,): taking the published
    # keys as they stand was the false mismatch that made the check skip salted starts.
    events = _events("tenant-a", "array", algo=algo)
    assert events[0]["extra_keys"][0] in (["tenant-a"], ("tenant-a",))
    assert check_first_blocks(events, HashSpec("", 128, algo=algo)) == (1, 0)
    assert check_first_blocks(events, HashSpec("", 128, algo=algo, seed="1")) == (0, 1)
    # A worker that hashes the bare salt (releases up to 0.22) is told apart.
    assert check_first_blocks(events, HashSpec("", 128, algo=algo, salt_form="bare")) == (0, 1)


def test_extra_keys_other_than_a_salt_are_not_counted():
    events = _events("tenant-a", "map")
    lora = [{**events[0], "extra_keys": [["my-lora", "tenant-a"], None]}]
    assert check_first_blocks(lora, HashSpec("", 128)) == (0, 0)
