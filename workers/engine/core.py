"""The engine core: one scheduling step at a time over the shared block pool.

Single-threaded by design: only the engine thread (see :mod:`workers.engine.engine`) calls
into it, so the pool, the queues and the requests need no locks and every step sees a
consistent view of ref counts and cached blocks.
"""

from __future__ import annotations

import logging
import time

import torch

from workers.engine.block_pool import BlockPool
from workers.engine.config import EngineConfig
from workers.engine.hashing import BlockHasher
from workers.engine.kv_cache_manager import KVCacheManager
from workers.engine.kv_events import EventPublisher
from workers.engine.metrics import EngineMetrics
from workers.engine.request import FinishReason, Request, RequestOutput
from workers.engine.runner import ModelRunner
from workers.engine.scheduler import Scheduler
from workers.engine.tokenizer import EOS_TOKEN_ID

logger = logging.getLogger(__name__)


class _Timing:
    """Per-request timestamps (monotonic seconds) behind the latency histograms."""

    __slots__ = ("scheduled", "first_token", "last_token")

    def __init__(self) -> None:
        self.scheduled: float | None = None
        self.first_token: float | None = None
        self.last_token: float | None = None


class EngineCore:
    """Scheduler, block pool, model runner and output processing of one engine."""

    def __init__(
        self, config: EngineConfig, metrics: EngineMetrics, publisher: EventPublisher
    ) -> None:
        config.validate()
        self.config = config
        self.metrics = metrics
        self.publisher = publisher
        self.max_model_len = config.resolved_max_model_len
        cache = config.cache_config
        self.runner = ModelRunner(config)
        events_on = config.kv_events is not None and config.kv_events.enable_kv_cache_events
        self.pool = BlockPool(
            config.num_gpu_blocks,
            block_size=cache.block_size,
            enable_caching=cache.enable_prefix_caching,
            emit_events=events_on and cache.enable_prefix_caching,
        )
        self.hasher = BlockHasher(
            block_size=cache.block_size,
            algo=cache.prefix_caching_hash_algo,
            hash_seed=cache.hash_seed,
        )
        self.kv = KVCacheManager(self.pool, self.hasher)
        self.scheduler = Scheduler(
            self.kv,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_num_seqs=config.max_num_seqs,
        )
        self.requests: dict[str, Request] = {}
        self._timing: dict[str, _Timing] = {}
        self.sleeping = False
        self.update_gauges()

    # -- requests ---------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if not 0 < request.num_prompt_tokens < self.max_model_len:
            raise ValueError(
                f"prompt of {request.num_prompt_tokens} tokens does not fit max_model_len "
                f"{self.max_model_len} with room for one generated token"
            )
        if request.sampling.seed is not None:
            request.generator = torch.Generator().manual_seed(request.sampling.seed)
        self.requests[request.request_id] = request
        self._timing[request.request_id] = _Timing()
        self.scheduler.add(request)
        self.metrics.request_max_tokens.observe(request.sampling.max_tokens)
        self.metrics.request_n.observe(1)
        self.update_gauges()

    def abort(self, request_id: str, reason: FinishReason = FinishReason.ABORT) -> None:
        request = self.requests.get(request_id)
        if request is not None:
            self._finish(request, reason, None, time.monotonic())
            request.sink(self._output(request, [], [], finished=True, reason=reason))
            self.update_gauges()

    def abort_all(self, reason: FinishReason, error: str | None = None) -> None:
        for request in list(self.requests.values()):
            self._finish(request, reason, None, time.monotonic())
            out = self._output(request, [], [], finished=True, reason=reason)
            out.error = error
            request.sink(out)
        self.update_gauges()

    def can_step(self) -> bool:
        return self.scheduler.has_work() and not self.sleeping

    # -- one step ---------------------------------------------------------------------------

    def step(self) -> None:
        scheduled, stats = self.scheduler.schedule()
        now = time.monotonic()
        self.metrics.prefix_queries.inc(stats.queried_tokens)
        self.metrics.prefix_hits.inc(stats.hit_tokens)
        self.metrics.preemptions.inc(stats.preemptions)
        for item in scheduled:
            timing = self._timing[item.request.request_id]
            if timing.scheduled is None:
                timing.scheduled = now
                self.metrics.queue_time.observe(now - item.request.arrival_time)
        if scheduled:
            results = self.runner.execute(scheduled, self.kv.block_ids)
            self.metrics.iteration_tokens.observe(sum(s.num_new_tokens for s in scheduled))
            for item in scheduled:
                item.request.num_computed_tokens += item.num_new_tokens
                self.kv.cache_computed_blocks(item.request)
            now = time.monotonic()
            for request, token, logprob in results:
                self._on_token(request, token, logprob, now)
        self.flush_events()
        self.update_gauges()

    def _on_token(self, request: Request, token: int, logprob: float, now: float) -> None:
        timing = self._timing[request.request_id]
        request.append_output(token)
        self.kv.update_hashes(request)
        request.text += request.detokenizer.push(token)
        if timing.first_token is None:
            timing.first_token = now
            self._count_prompt(request, now)
        elif timing.last_token is not None:
            self.metrics.itl.observe(now - timing.last_token)
        timing.last_token = now
        self.metrics.generation_tokens.inc()
        reason, stop_reason = self._check_stop(request, token)
        if reason is not None:
            self._finish(request, reason, stop_reason, now)
        request.sink(
            self._output(
                request,
                [token],
                [logprob],
                finished=reason is not None,
                reason=reason,
                stop_reason=stop_reason,
            )
        )

    def _count_prompt(self, request: Request, now: float) -> None:
        m = self.metrics
        cached = max(request.num_cached_tokens, 0)
        m.ttft.observe(now - request.arrival_time)
        m.prompt_tokens.inc(request.num_prompt_tokens)
        m.prompt_cache_hit.inc(cached)
        m.prompt_cached.inc(cached)
        m.prompt_computed.inc(request.num_prompt_tokens - cached)
        m.request_prompt_tokens.observe(request.num_prompt_tokens)
        m.request_kv_computed.observe(request.num_prompt_tokens - cached)

    def _check_stop(
        self, request: Request, token: int
    ) -> tuple[FinishReason | None, int | str | None]:
        params = request.sampling
        if len(request.output_token_ids) >= params.min_tokens:
            if token == EOS_TOKEN_ID and not params.ignore_eos:
                return FinishReason.STOP, None
            if token in params.stop_token_ids:
                return FinishReason.STOP, token
            if params.stop:
                found = self._find_stop_string(request)
                if found is not None:
                    return FinishReason.STOP, found
        if len(request.output_token_ids) >= params.max_tokens:
            return FinishReason.LENGTH, None
        if request.num_tokens >= self.max_model_len:
            return FinishReason.LENGTH, None
        return None, None

    @staticmethod
    def _find_stop_string(request: Request) -> str | None:
        # Only the tail can hold a new match: text before the held-back window was searched
        # on earlier tokens.
        longest = max(len(s) for s in request.sampling.stop)
        start = max(0, request.emitted_text_len - longest)
        best: tuple[int, str] | None = None
        for stop in request.sampling.stop:
            index = request.text.find(stop, start)
            if index >= 0 and (best is None or index < best[0]):
                best = (index, stop)
        if best is None:
            return None
        index, stop = best
        keep = index + (len(stop) if request.sampling.include_stop_str_in_output else 0)
        request.text = request.text[:keep]
        return stop

    def _finish(
        self, request: Request, reason: FinishReason, stop_reason: int | str | None, now: float
    ) -> None:
        if reason != FinishReason.STOP or not isinstance(stop_reason, str):
            request.text += request.detokenizer.flush()
        self.scheduler.finish(request)
        self.requests.pop(request.request_id, None)
        timing = self._timing.pop(request.request_id, _Timing())
        m = self.metrics
        m.finished(reason)
        m.e2e.observe(now - request.arrival_time)
        m.request_generation_tokens.observe(len(request.output_token_ids))
        if timing.scheduled is not None:
            m.inference_time.observe(now - timing.scheduled)
            if timing.first_token is not None:
                m.prefill_time.observe(timing.first_token - timing.scheduled)
                m.decode_time.observe(now - timing.first_token)
                if len(request.output_token_ids) > 1:
                    m.tpot.observe((now - timing.first_token) / (len(request.output_token_ids) - 1))

    def _output(
        self,
        request: Request,
        tokens: list[int],
        logprobs: list[float],
        *,
        finished: bool,
        reason: FinishReason | None,
        stop_reason: int | str | None = None,
    ) -> RequestOutput:
        # Hold back the tail that could still grow into a stop string, as vLLM does.
        upto = len(request.text)
        if request.sampling.stop and not finished:
            upto -= max(len(s) for s in request.sampling.stop) - 1
        upto = max(upto, request.emitted_text_len)
        delta = request.text[request.emitted_text_len : upto]
        request.emitted_text_len = upto
        return RequestOutput(
            request_id=request.request_id,
            new_token_ids=tokens,
            new_logprobs=logprobs,
            text_delta=delta,
            finished=finished,
            finish_reason=reason,
            stop_reason=stop_reason,
            num_prompt_tokens=request.num_prompt_tokens,
            num_cached_tokens=max(request.num_cached_tokens, 0),
        )

    # -- cache control ----------------------------------------------------------------------

    def flush_events(self) -> None:
        events = self.pool.take_events()
        if events:
            self.publisher.publish(events)

    def update_gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.scheduler.running))
        m.waiting.set(len(self.scheduler.waiting))
        m.waiting_capacity.set(len(self.scheduler.waiting))
        m.kv_usage.set(self.pool.usage)

    def reset_prefix_cache(self) -> bool:
        ok = self.pool.reset_prefix_cache()
        if not ok:
            logger.warning("prefix cache not reset: blocks are still in use by requests")
        self.flush_events()
        return ok

    def sleep(self, level: int) -> None:
        """Pause; level >= 1 also drops the prefix cache, level 2 the weights as well.

        In-flight requests are aborted first (vLLM's default ``mode=abort``), which frees
        every block so the cache reset cannot fail.
        """
        self.abort_all(FinishReason.ABORT)
        if level >= 1:
            self.reset_prefix_cache()
        if level >= 2:
            self.runner.model.drop_weights()
        self.sleeping = True
        self.metrics.set_sleep_state(sleeping=True, level=level)

    def wake_up(self) -> None:
        if not self.runner.model.has_weights:
            self.runner.model.reload_weights()
        self.sleeping = False
        self.metrics.set_sleep_state(sleeping=False)
