"""Per-step scheduling: continuous batching with chunked prefill and recompute preemption.

Each step has a token budget (``max_num_batched_tokens``). Running requests go first, in
arrival order: a decode needs one token, an unfinished prefill the rest of its prompt (or as
much as the budget allows). When the pool cannot give a running request its next block, the
most recently admitted running request is preempted, as vLLM does: its blocks are freed
(they stay cached, so the recompute usually hits), it returns to the head of the waiting
queue and later recomputes prompt plus output so far. Waiting requests are admitted only in
steps without preemption and only if their blocks fit without evicting anyone running; a
request that does not fit simply waits. No request is ever refused for lack of KV memory:
start-up checks that a max-length request fits in an empty pool.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from workers.engine.kv_cache_manager import KVCacheManager
from workers.engine.request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int


@dataclass
class AdmissionStats:
    """Prefix-cache lookups made this step, for the ``prefix_cache_*`` counters."""

    queried_tokens: int = 0
    hit_tokens: int = 0
    preemptions: int = 0


class Scheduler:
    def __init__(self, kv: KVCacheManager, *, max_num_batched_tokens: int, max_num_seqs: int):
        self.kv = kv
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.kv.update_hashes(request)
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> tuple[list[ScheduledRequest], AdmissionStats]:
        budget = self.max_num_batched_tokens
        scheduled: list[ScheduledRequest] = []
        stats = AdmissionStats()
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self._allocate_or_preempt(request, num_new, stats):
                break  # the request itself was preempted; it was the last one running
            scheduled.append(ScheduledRequest(request, num_new))
            budget -= num_new
            index += 1
        if stats.preemptions:
            return scheduled, stats
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hits = self.kv.find_cached_prefix(request)
            num_hit_tokens = len(hits) * self.kv.block_size
            num_new = min(request.num_tokens - num_hit_tokens, budget)
            if not self.kv.allocate_slots(request, num_new, hits):
                break  # first come, first served: later arrivals do not jump the queue
            self.waiting.popleft()
            request.num_computed_tokens = num_hit_tokens
            if request.num_cached_tokens < 0:
                # First admission only: recomputing a preempted request is not a new query.
                request.num_cached_tokens = num_hit_tokens
                if self.kv.caching:
                    stats.queried_tokens += request.num_tokens
                    stats.hit_tokens += num_hit_tokens
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            scheduled.append(ScheduledRequest(request, num_new))
            budget -= num_new
        return scheduled, stats

    def _allocate_or_preempt(self, request: Request, num_new: int, stats: AdmissionStats) -> bool:
        while not self.kv.allocate_slots(request, num_new):
            victim = self.running.pop()
            self._preempt(victim)
            stats.preemptions += 1
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(request)

    def finish(self, request: Request) -> None:
        """Drop a request from whichever queue holds it and free its blocks."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.kv.free(request)
        request.status = RequestStatus.FINISHED
