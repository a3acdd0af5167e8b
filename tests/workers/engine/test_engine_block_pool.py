"""Block pool bookkeeping: LRU order, tail-first freeing, eviction events, ref counts, reset."""

from __future__ import annotations

import pytest

from workers.engine.block_pool import BlockPool
from workers.engine.hashing import block_hash_chain, event_hash
from workers.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored


def _pool(num_blocks: int = 6) -> BlockPool:
    return BlockPool(num_blocks, block_size=4, enable_caching=True, emit_events=True)


def _cache_chain(pool: BlockPool, tokens: list[int], salt: str | None = None) -> list:
    hashes = block_hash_chain(tokens, block_size=4, cache_salt=salt)
    blocks = pool.get_new_blocks(len(hashes))
    pool.cache_full_blocks(
        blocks, hashes, start=0, end=len(hashes), token_ids=tokens, cache_salt=salt
    )
    return blocks


def test_block_zero_is_the_null_block_and_never_handed_out() -> None:
    pool = _pool(4)
    assert pool.null_block.block_id == 0
    assert pool.num_free_blocks == 3
    assert 0 not in {b.block_id for b in pool.get_new_blocks(3)}
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)


def test_blocks_stored_once_cached_and_event_lists_the_chain() -> None:
    pool = _pool()
    tokens = list(range(8))
    blocks = _cache_chain(pool, tokens, salt="s")
    hashes = block_hash_chain(tokens, block_size=4, cache_salt="s")
    assert [pool.get_cached_block(h) for h in hashes] == blocks
    (event,) = pool.take_events()
    assert event == BlockStored(
        block_hashes=[event_hash(h) for h in hashes],
        parent_block_hash=None,
        token_ids=tokens,
        block_size=4,
        lora_id=None,
        medium="GPU",
        lora_name=None,
        extra_keys=[("s",), None],  # vLLM 0.32 hashes the salt tagged, publishes it bare
        group_idx=0,
        kv_cache_spec_kind="full_attention",
    )


def test_freed_chain_is_evicted_tail_first_and_emits_block_removed() -> None:
    pool = _pool(6)  # 5 usable blocks
    blocks = _cache_chain(pool, list(range(12)))  # 3 cached blocks
    pool.take_events()
    pool.free_blocks(reversed(blocks))
    assert [b.block_id for b in pool.free_queue][-3:] == [b.block_id for b in reversed(blocks)]
    # Two never-used blocks go first, then the chain's tail, then its middle.
    new = pool.get_new_blocks(4)
    assert new[2] is blocks[2] and new[3] is blocks[1]
    hashes = block_hash_chain(list(range(12)), block_size=4)
    assert pool.take_events() == [
        BlockRemoved(block_hashes=[event_hash(hashes[2])], medium="GPU", group_idx=0),
        BlockRemoved(block_hashes=[event_hash(hashes[1])], medium="GPU", group_idx=0),
    ]
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    assert pool.get_cached_block(hashes[1]) is None


def test_referenced_blocks_are_never_evicted() -> None:
    pool = _pool(4)  # 3 usable
    held = _cache_chain(pool, list(range(8)))
    pool.take_events()
    assert pool.num_free_blocks == 1
    pool.get_new_blocks(1)
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)
    assert all(b.block_hash is not None for b in held)
    assert pool.take_events() == []


def test_touch_takes_a_free_cached_block_off_the_queue() -> None:
    pool = _pool(4)
    blocks = _cache_chain(pool, list(range(4)))
    pool.free_blocks(blocks)
    assert pool.num_free_blocks == 3
    pool.touch(blocks)
    assert pool.num_free_blocks == 2 and blocks[0].ref_cnt == 1
    assert blocks[0] not in list(pool.free_queue)


def test_usage_counts_referenced_blocks_only() -> None:
    pool = _pool(5)
    blocks = _cache_chain(pool, list(range(8)))
    assert pool.usage == pytest.approx(0.5)
    pool.free_blocks(blocks)
    assert pool.usage == 0.0
    assert pool.num_cached_blocks == 2


def test_reset_only_when_every_block_is_free() -> None:
    pool = _pool()
    blocks = _cache_chain(pool, list(range(8)))
    pool.take_events()
    assert pool.reset_prefix_cache() is False
    assert pool.take_events() == []
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert pool.take_events() == [AllBlocksCleared()]
    assert pool.num_cached_blocks == 0
    assert all(b.block_hash is None for b in pool.blocks)
