"""Per-request block tables on top of the block pool: prefix hits, slot allocation, caching.

Follows vLLM's ``KVCacheManager``: a new request looks up the longest chain of cached full
blocks, capped so at least the last prompt token is recomputed (its logits are needed);
blocks are allocated for each step's new tokens; blocks whose tokens are all computed are
registered in the prefix cache; a finished or preempted request frees its blocks in reverse.
"""

from __future__ import annotations

from workers.engine.block_pool import BlockPool, KVCacheBlock
from workers.engine.hashing import BlockHasher
from workers.engine.request import Request


class KVCacheManager:
    def __init__(self, pool: BlockPool, hasher: BlockHasher) -> None:
        self.pool = pool
        self.hasher = hasher
        self.block_size = pool.block_size
        self._blocks: dict[str, list[KVCacheBlock]] = {}
        self._num_cached: dict[str, int] = {}

    @property
    def caching(self) -> bool:
        return self.pool.enable_caching

    def update_hashes(self, request: Request) -> None:
        """Hash every block of the request that became full (prompt or generated tokens)."""
        if self.caching:
            self.hasher.extend(request.block_hashes, request.all_token_ids, request.cache_salt)

    def find_cached_prefix(self, request: Request) -> list[KVCacheBlock]:
        """Longest run of cached blocks matching the request's chain, without taking them."""
        if not self.caching:
            return []
        # The last token is always recomputed, so a fully cached prompt still yields logits.
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit_blocks: list[KVCacheBlock] | None = None,
    ) -> bool:
        """Make room for ``num_new_tokens`` after the computed ones; False if the pool is short.

        Hit blocks that are free still count as free until taken, so they are subtracted
        from what an allocation may use before deciding.
        """
        hit_blocks = hit_blocks or []
        blocks = self._blocks.setdefault(request.request_id, [])
        num_computed = request.num_computed_tokens + len(hit_blocks) * self.block_size
        needed_total = -(-(num_computed + num_new_tokens) // self.block_size)
        to_allocate = needed_total - len(blocks) - len(hit_blocks)
        evictable_hits = sum(1 for b in hit_blocks if b.ref_cnt == 0)
        if to_allocate > self.pool.num_free_blocks - evictable_hits:
            if not blocks:
                del self._blocks[request.request_id]
            return False
        if hit_blocks:
            # Hits only come to a request holding no blocks, and they are cached already.
            self.pool.touch(hit_blocks)
            blocks.extend(hit_blocks)
            self._num_cached[request.request_id] = len(blocks)
        if to_allocate > 0:
            blocks.extend(self.pool.get_new_blocks(to_allocate))
        return True

    def cache_computed_blocks(self, request: Request) -> None:
        """Register blocks that are now full of computed K/V (emits BlockStored)."""
        if not self.caching:
            return
        blocks = self._blocks[request.request_id]
        start = self._num_cached.get(request.request_id, 0)
        end = min(request.num_computed_tokens // self.block_size, len(request.block_hashes))
        if end > start:
            self.pool.cache_full_blocks(
                blocks,
                request.block_hashes,
                start=start,
                end=end,
                token_ids=request.all_token_ids,
                cache_salt=request.cache_salt,
            )
            self._num_cached[request.request_id] = end

    def free(self, request: Request) -> None:
        """Release the request's blocks tail-first so chain tails are evicted first."""
        blocks = self._blocks.pop(request.request_id, [])
        self._num_cached.pop(request.request_id, None)
        self.pool.free_blocks(reversed(blocks))

    def block_ids(self, request: Request) -> list[int]:
        return [b.block_id for b in self._blocks.get(request.request_id, [])]
