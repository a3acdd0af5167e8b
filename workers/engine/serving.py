"""Completions and chat completions: engine requests in, vLLM-shaped bodies and SSE out.

One HTTP request becomes one engine request per prompt and copy (``n``); their outputs are
merged by choice index. Non-streaming responses are assembled at the end; streams emit one
chunk per text delta, a final usage chunk when ``stream_options.include_usage`` is set, and
``data: [DONE]``, as vLLM's ``serving_completion`` / ``serving_chat`` do.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from workers.engine import tokenizer
from workers.engine.engine import Engine
from workers.engine.openai_protocol import (
    APIError,
    GenerationRequest,
    error_body,
    finish_fields,
    now,
    usage,
)
from workers.engine.request import RequestOutput, SamplingParams


def sse(data: dict[str, Any] | str) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n"


class GenerationServing:
    """Runs validated generation requests on one engine; counts in-flight ones for ``/load``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.config = engine.config
        self.load = 0

    def _track(self, delta: int) -> None:
        if self.config.enable_server_load_tracking:
            self.load += delta

    @staticmethod
    def _jobs(gen: GenerationRequest) -> list[tuple[list[int], SamplingParams]]:
        jobs = []
        for prompt in gen.prompts:
            for copy in range(gen.n):
                sampling = gen.sampling
                if copy and sampling.seed is not None:
                    # vLLM's parallel sampling offsets the seed per child request.
                    sampling = dataclasses.replace(sampling, seed=sampling.seed + copy)
                jobs.append((prompt, sampling))
        return jobs

    def _usage(
        self,
        gen: GenerationRequest,
        completion_tokens: int,
        cached: int,
        *,
        prompt_tokens: int | None = None,
        compact: bool = False,
    ) -> dict[str, Any]:
        out = usage(
            sum(len(p) for p in gen.prompts) if prompt_tokens is None else prompt_tokens,
            completion_tokens,
            cached,
            details_enabled=self.config.enable_prompt_tokens_details,
        )
        if compact and out["prompt_tokens_details"] is None:
            del out["prompt_tokens_details"]  # vLLM drops nulls from streamed usage chunks
        return out

    def _echo_prefix(self, gen: GenerationRequest, index: int) -> str:
        if not gen.echo:
            return ""
        prompt_index = index // gen.n
        text = gen.prompt_texts[prompt_index]
        return text if text is not None else tokenizer.decode(gen.prompts[prompt_index])

    async def collect(
        self, gen: GenerationRequest, response_id: str, *, chat: bool
    ) -> dict[str, Any]:
        """Run to completion and return the whole response body."""
        self._track(+1)
        try:
            return await self._collect(gen, response_id, chat=chat)
        finally:
            self._track(-1)

    async def _collect(
        self, gen: GenerationRequest, response_id: str, *, chat: bool
    ) -> dict[str, Any]:
        jobs = self._jobs(gen)
        texts = [self._echo_prefix(gen, i) for i in range(len(jobs))]
        counts = [0] * len(jobs)
        finals: list[RequestOutput | None] = [None] * len(jobs)
        # aclosing: an early exit must abort the sibling requests now, not at GC time.
        async with aclosing(
            self.engine.stream_many(jobs, cache_salt=gen.cache_salt, request_id_prefix=response_id)
        ) as outputs:
            async for index, out in outputs:
                if out.error:
                    raise APIError(out.error, status=500, err_type="InternalServerError")
                texts[index] += out.text_delta
                counts[index] += len(out.new_token_ids)
                if out.finished:
                    finals[index] = out
        cached = sum(f.num_cached_tokens for f in finals[:: gen.n] if f is not None)
        if chat:
            choices = [
                {
                    "index": i,
                    "message": {
                        "role": "assistant",
                        "content": texts[i],
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "tool_calls": [],
                        "reasoning_content": None,
                    },
                    "logprobs": None,
                    **finish_fields(finals[i]),
                }
                for i in range(len(jobs))
            ]
        else:
            choices = [
                {
                    "index": i,
                    "text": texts[i],
                    "logprobs": None,
                    **finish_fields(finals[i]),
                    "prompt_logprobs": None,
                }
                for i in range(len(jobs))
            ]
        response: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": now(),
            "model": gen.model,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self._usage(gen, sum(counts), cached),
        }
        if chat:
            response["prompt_logprobs"] = None
        response["kv_transfer_params"] = None
        return response

    async def stream(
        self, gen: GenerationRequest, response_id: str, *, chat: bool
    ) -> AsyncIterator[str]:
        """Yield SSE lines; leaving early (client gone) aborts the engine requests."""
        jobs = self._jobs(gen)
        head = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": now(),
            "model": gen.model,
        }
        started = [False] * len(jobs)
        counts = [0] * len(jobs)
        cached = [0] * len(jobs)

        def chunk(index: int, choice: dict[str, Any]) -> str:
            body: dict[str, Any] = {**head, "choices": [choice]}
            if gen.include_usage:
                body["usage"] = None
                if gen.continuous_usage:
                    body["usage"] = self._usage(
                        gen, counts[index], cached[index], prompt_tokens=len(jobs[index][0])
                    )
            return sse(body)

        self._track(+1)
        outputs = self.engine.stream_many(
            jobs, cache_salt=gen.cache_salt, request_id_prefix=response_id
        )
        try:
            async for index, out in outputs:
                if out.error:
                    yield sse(error_body(out.error, "InternalServerError", 500))
                    break
                counts[index] += len(out.new_token_ids)
                cached[index] = out.num_cached_tokens
                text = out.text_delta
                if not started[index]:
                    started[index] = True
                    if chat:
                        role = {"role": "assistant", "content": ""}
                        yield chunk(
                            index,
                            {
                                "index": index,
                                "delta": role,
                                "logprobs": None,
                                "finish_reason": None,
                            },
                        )
                    else:
                        text = self._echo_prefix(gen, index) + text
                if not text and not out.finished:
                    continue
                if chat:
                    delta = {"content": text} if text else {}
                    choice = {"index": index, "delta": delta, "logprobs": None}
                else:
                    choice = {"index": index, "text": text, "logprobs": None}
                yield chunk(index, {**choice, **finish_fields(out)})
            else:
                if gen.include_usage:
                    final = self._usage(gen, sum(counts), sum(cached[:: gen.n]), compact=True)
                    yield sse({**head, "choices": [], "usage": final})
            yield sse("[DONE]")
        finally:
            await outputs.aclose()
            self._track(-1)
