"""The KV block pool: ref counts, the LRU free queue and the prefix-cache hash map.

Mirrors vLLM's ``BlockPool`` and ``FreeKVCacheBlockQueue``:

* every block exists from the start; block 0 is the null block and is never handed out;
* free blocks, cached ones included, sit in a doubly linked list in eviction order (LRU
  at the head); a hit takes a block off the list (``touch``), a finished request puts its
  blocks back tail-first so chain tails are evicted before their parents;
* allocation pops the head; if that block still has a hash it leaves the hash map and a
  ``BlockRemoved`` event is queued. Blocks with ``ref_cnt > 0`` are never on the list, so
  they are never evicted;
* identical blocks may be cached twice (no dedup), so block tables stay append-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from workers.engine.hashing import event_extra_keys, event_hash
from workers.engine.kv_events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
)


class KVCacheBlock:
    __slots__ = ("block_id", "ref_cnt", "block_hash", "prev", "next")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None
        self.prev: KVCacheBlock | None = None
        self.next: KVCacheBlock | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, cached={bool(self.block_hash)})"


class FreeBlockQueue:
    """Doubly linked list of free blocks with O(1) pop-left, append and remove-anywhere."""

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        self._head.next, self._tail.prev = self._tail, self._head
        self._len = 0
        for block in blocks:
            self.append(block)

    def __len__(self) -> int:
        return self._len

    def popleft(self) -> KVCacheBlock:
        block = self._head.next
        if block is self._tail or block is None:
            raise ValueError("no free blocks")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        assert block.prev is not None and block.next is not None, "block is not free"
        block.prev.next, block.next.prev = block.next, block.prev
        block.prev = block.next = None
        self._len -= 1

    def append(self, block: KVCacheBlock) -> None:
        last = self._tail.prev
        assert last is not None
        last.next, block.prev, block.next, self._tail.prev = block, last, self._tail, block
        self._len += 1

    def __iter__(self) -> Iterator[KVCacheBlock]:
        """Free blocks in eviction order, LRU head first."""
        block = self._head.next
        while block is not None and block is not self._tail:
            yield block
            block = block.next


class BlockPool:
    """Owns every block; the only place that evicts, caches and emits block events."""

    def __init__(
        self, num_blocks: int, *, block_size: int, enable_caching: bool, emit_events: bool
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.emit_events = emit_events
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.null_block = self.free_queue.popleft()
        self.cached: dict[bytes, dict[int, KVCacheBlock]] = {}
        self._events: list[KVCacheEvent] = []

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: referenced blocks; cached-but-free ones count free."""
        return 1.0 - self.num_free_blocks / (self.num_blocks - 1)

    @property
    def num_cached_blocks(self) -> int:
        return sum(len(by_id) for by_id in self.cached.values())

    def get_cached_block(self, block_hash: bytes) -> KVCacheBlock | None:
        by_id = self.cached.get(block_hash)
        return next(iter(by_id.values())) if by_id else None

    def get_new_blocks(self, count: int) -> list[KVCacheBlock]:
        if count > self.num_free_blocks:
            raise ValueError(f"cannot allocate {count} blocks, {self.num_free_blocks} free")
        blocks = []
        for _ in range(count):
            block = self.free_queue.popleft()
            self._evict(block)
            block.ref_cnt = 1
            blocks.append(block)
        return blocks

    def _evict(self, block: KVCacheBlock) -> None:
        if block.block_hash is None:
            return
        by_id = self.cached.get(block.block_hash)
        if by_id is not None and by_id.pop(block.block_id, None) is not None:
            if not by_id:
                del self.cached[block.block_hash]
            if self.emit_events:
                self._events.append(
                    BlockRemoved(
                        block_hashes=[event_hash(block.block_hash)], medium=MEDIUM_GPU, group_idx=0
                    )
                )
        block.block_hash = None

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take hit blocks: a free (evictable) one leaves the free queue before ref_cnt rises."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block; those now unused join the tail of the queue,
        in the given order (callers pass a request's blocks reversed)."""
        for block in ordered:
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, block
            if block.ref_cnt == 0:
                self.free_queue.append(block)

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[bytes],
        *,
        start: int,
        end: int,
        token_ids: Sequence[int],
        cache_salt: str | None,
    ) -> None:
        """Register blocks ``start..end-1`` of one request as cached and emit BlockStored."""
        if not self.enable_caching or start >= end:
            return
        for index in range(start, end):
            block = blocks[index]
            assert block.block_hash is None, block
            block.block_hash = block_hashes[index]
            self.cached.setdefault(block.block_hash, {})[block.block_id] = block
        if self.emit_events:
            bs = self.block_size
            self._events.append(
                BlockStored(
                    block_hashes=[event_hash(h) for h in block_hashes[start:end]],
                    parent_block_hash=event_hash(block_hashes[start - 1]) if start else None,
                    token_ids=list(token_ids[start * bs : end * bs]),
                    block_size=bs,
                    lora_id=None,
                    medium=MEDIUM_GPU,
                    lora_name=None,
                    extra_keys=[event_extra_keys(i, cache_salt) for i in range(start, end)],
                    group_idx=0,
                    kv_cache_spec_kind="full_attention",
                )
            )

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, only if no block but the null block is in use."""
        if self.num_free_blocks != self.num_blocks - 1:
            return False
        self.cached.clear()
        for block in self.blocks:
            block.block_hash = None
        if self.emit_events:
            self._events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVCacheEvent]:
        events, self._events = self._events, []
        return events
