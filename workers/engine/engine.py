"""The engine thread and the thread-safe API that HTTP handlers, tests and benchmarks call.

One background thread owns the :class:`EngineCore` and runs scheduling steps while there
is work; everything else talks to it through a queue of callables, so no engine state is
ever touched from two threads. Outputs flow back through per-request sinks: a
``queue.Queue`` for blocking callers, ``loop.call_soon_threadsafe`` into an
``asyncio.Queue`` for coroutines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from prometheus_client import CollectorRegistry

from workers.engine.config import EngineConfig
from workers.engine.core import EngineCore
from workers.engine.kv_events import create_publisher
from workers.engine.metrics import EngineMetrics
from workers.engine.request import (
    FinishReason,
    Request,
    RequestOutput,
    SamplingParams,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


class EngineDeadError(RuntimeError):
    """The engine thread crashed; ``/health`` answers 503 from then on, as in vLLM."""


@dataclass
class Completion:
    """Everything one finished request produced (for blocking callers and tests)."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float = 0.0


class Engine:
    """A started engine: build it, :meth:`start` it, submit requests, :meth:`shutdown`."""

    def __init__(self, config: EngineConfig, *, registry: CollectorRegistry | None = None):
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.config = config
        self.metrics = EngineMetrics(config, registry)
        self.publisher = create_publisher(config.kv_events)
        try:
            self.core = EngineCore(config, self.metrics, self.publisher)
        except BaseException:
            self.publisher.shutdown()
            raise
        self.dead: BaseException | None = None
        self._inbox: queue.SimpleQueue[Callable[[EngineCore], None]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-core", daemon=True)
        self._ids = itertools.count()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Engine:
        self._thread.start()
        return self

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self.call(lambda core: core.abort_all(FinishReason.ABORT), timeout=10)
            self._stopping.set()
            self._inbox.put(lambda core: None)
            self._thread.join(timeout=10)
        self.publisher.shutdown()

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _loop(self) -> None:
        core = self.core
        while not self._stopping.is_set():
            try:
                item = self._inbox.get(timeout=0.1) if not core.can_step() else None
            except queue.Empty:
                item = None
            try:
                while True:
                    if item is not None:
                        self._run_item(item, core)
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            if core.can_step() and self.dead is None:
                try:
                    core.step()
                except Exception as exc:  # the engine is unusable after a failed step
                    logger.exception("engine step failed; failing every request")
                    self.dead = exc
                    core.abort_all(FinishReason.ERROR, error=f"engine failed: {exc}")

    @staticmethod
    def _run_item(item: Callable[[EngineCore], None], core: EngineCore) -> None:
        try:
            item(core)
        except Exception:  # a bad command must not take the engine thread down
            logger.exception("engine command failed")

    # -- thread-safe API --------------------------------------------------------------------

    def call(self, fn: Callable[[EngineCore], T], timeout: float | None = 30) -> T:
        """Run ``fn(core)`` on the engine thread between steps and return its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run(core: EngineCore) -> None:
            try:
                future.set_result(fn(core))
            except BaseException as exc:
                future.set_exception(exc)

        self._inbox.put(run)
        return future.result(timeout)

    async def acall(self, fn: Callable[[EngineCore], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, self.call, fn)

    def new_request_id(self) -> str:
        return f"{uuid.uuid4().hex[:16]}-{next(self._ids)}"

    def submit(
        self,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        sink: Callable[[RequestOutput], None],
        *,
        cache_salt: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Queue a request; outputs go to ``sink`` (called on the engine thread)."""
        request = Request(
            request_id=request_id or self.new_request_id(),
            prompt_token_ids=list(prompt_token_ids),
            sampling=sampling,
            sink=sink,
            cache_salt=cache_salt,
        )
        if self.dead is not None:
            raise EngineDeadError(str(self.dead))

        def add(core: EngineCore) -> None:
            try:
                core.add_request(request)
            except ValueError as exc:
                sink(
                    RequestOutput(
                        request.request_id, [], [], "", True, FinishReason.ERROR, error=str(exc)
                    )
                )

        self._inbox.put(add)
        return request.request_id

    def abort(self, request_id: str) -> None:
        self._inbox.put(lambda core: core.abort(request_id))

    def generate(
        self,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        cache_salt: str | None = None,
        timeout: float = 120,
    ) -> Completion:
        """Run one request to completion from a plain thread (tests, benchmarks)."""
        outputs: queue.SimpleQueue[RequestOutput] = queue.SimpleQueue()
        start = time.perf_counter()
        request_id = self.submit(prompt_token_ids, sampling, outputs.put, cache_salt=cache_salt)
        result = Completion(request_id=request_id, prompt_token_ids=list(prompt_token_ids))
        deadline = start + timeout
        while True:
            out = outputs.get(timeout=max(deadline - time.perf_counter(), 0.001))
            if out.new_token_ids and result.ttft_s is None:
                result.ttft_s = time.perf_counter() - start
            _accumulate(result, out)
            if out.finished:
                result.e2e_s = time.perf_counter() - start
                if out.error:
                    raise RuntimeError(out.error)
                return result

    async def stream(
        self,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield one request's outputs as the engine produces them."""
        outputs = self.stream_many([(prompt_token_ids, sampling)], cache_salt=cache_salt)
        async with aclosing(outputs):
            async for _, out in outputs:
                yield out

    async def stream_many(
        self,
        jobs: list[tuple[list[int], SamplingParams]],
        *,
        cache_salt: str | None = None,
        request_id_prefix: str | None = None,
    ) -> AsyncGenerator[tuple[int, RequestOutput], None]:
        """Run several requests (batched prompts, ``n`` > 1) and yield ``(job index, output)``
        as they arrive; requests still running when the consumer stops are aborted."""
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[tuple[int, RequestOutput]] = asyncio.Queue()

        def sink_for(index: int) -> Callable[[RequestOutput], None]:
            def sink(out: RequestOutput) -> None:
                # Runs on the engine thread; a consumer whose loop has closed is just gone.
                try:
                    loop.call_soon_threadsafe(outputs.put_nowait, (index, out))
                except RuntimeError:
                    pass

            return sink

        pending: dict[int, str] = {}
        try:
            for index, (prompt, sampling) in enumerate(jobs):
                # A suffix keeps engine ids unique when clients reuse an X-Request-Id.
                rid = (
                    f"{request_id_prefix}-{index}-{uuid.uuid4().hex[:8]}"
                    if request_id_prefix
                    else None
                )
                pending[index] = self.submit(
                    prompt, sampling, sink_for(index), cache_salt=cache_salt, request_id=rid
                )
            while pending:
                index, out = await outputs.get()
                if out.finished:
                    pending.pop(index, None)
                yield index, out
        finally:
            for rid in pending.values():
                self.abort(rid)

    # -- introspection ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Pool and queue state, read on the engine thread (for tests and debugging)."""

        def read(core: EngineCore) -> dict[str, Any]:
            pool = core.pool
            return {
                "num_blocks": pool.num_blocks,
                "free_blocks": pool.num_free_blocks,
                "cached_blocks": pool.num_cached_blocks,
                "cached_hashes": set(pool.cached),
                "running": len(core.scheduler.running),
                "waiting": len(core.scheduler.waiting),
                "usage": pool.usage,
            }

        return self.call(read)


def _accumulate(result: Completion, out: RequestOutput) -> None:
    result.token_ids.extend(out.new_token_ids)
    result.logprobs.extend(out.new_logprobs)
    result.text += out.text_delta
    result.num_cached_tokens = out.num_cached_tokens
    if out.finished:
        result.finish_reason = out.finish_reason
        result.stop_reason = out.stop_reason
