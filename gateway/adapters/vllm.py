"""vLLM-protocol workers (vLLM itself or the reference worker): OpenAI in, OpenAI out.

prepare: refuse what vLLM does not implement, prepend a named cache's prefix, set the
tenant's ``cache_salt``, and ask for usage in every stream chunk
(``continuous_usage_stats``) so an aborted stream is booked from what was streamed.
route: prefix-affine, load-bounded worker order (``gateway.routing``). send: the first
worker that accepts a connection; a worker's error answer is re-shaped into the
gateway's error shape with its status (and ``Retry-After``) kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from prometheus_client import Counter

from gateway import upstream
from gateway.adapters.base import (
    Call,
    Target,
    Upstream,
    Usage,
    check_parameters,
    output_bound,
    prompt_bound,
    prompt_estimate,
    refuse,
)
from gateway.directory import WorkerView, directory
from gateway.errors import GatewayError
from gateway.routing import PrefixIndex, order_candidates, pool_under_pressure, route_request
from workers.engine.parameters import unsupported_parameters

MAX_FAILOVER = 3
prefix_index = PrefixIndex()
UPSTREAM_RETRIES = Counter(
    "cacheplane_gateway_upstream_retries",
    "Requests sent once more after the worker connection broke before any answer.",
    ["reason"],
)

#: OpenAI parameters vLLM implements (the worker refuses, with its own 400, the ones a
#: given model or build cannot do, e.g. tools on the reference worker), plus vLLM's
#: documented sampling extensions.
_COMMON = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "user",
        # vLLM sampling extensions
        "top_k",
        "min_p",
        "repetition_penalty",
        "min_tokens",
        "ignore_eos",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    }
)
CHAT_PARAMETERS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
}
COMPLETION_PARAMETERS = _COMMON | {"prompt", "echo", "suffix", "best_of"}


class VllmAdapter:
    provider = "vllm"

    def prepare(self, call: Call) -> None:
        body = call.body
        check_parameters(
            body,
            allowed=CHAT_PARAMETERS if call.kind == "chat" else COMPLETION_PARAMETERS,
            provider="vLLM",
        )
        model = body.get("model")
        serving = directory.serving(model if isinstance(model, str) else "")
        if serving and all(w.engine == "reference" for w in serving):
            for name in unsupported_parameters(body):
                raise refuse(name, "vLLM", "the reference worker serving it does not implement it")
        options = body.get("stream_options") or {}
        if set(options) - {"include_usage", "continuous_usage_stats"}:
            bad = sorted(set(options) - {"include_usage", "continuous_usage_stats"})[0]
            raise refuse(f"stream_options.{bad}", "vLLM")
        call.extra["continuous"] = bool(options.get("continuous_usage_stats"))
        cache = call.cache
        if cache is not None and call.kind != "chat":
            raise GatewayError(
                400,
                "cache_requires_chat",
                "vLLM caches are used through /v1/chat/completions.",
                param="cache",
            )
        out = dict(body)
        if cache is not None:
            out["messages"] = [cache.prefix_message, *body["messages"]]
        out["cache_salt"] = call.identity.cache_salt
        if call.stream:
            out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        call.upstream_body = out
        given = body.get("max_completion_tokens") or body.get("max_tokens")
        # Without max_tokens a worker may generate up to its context length; the gateway's
        # cap is the bound it reserves for (workers are configured within it).
        # Per prompt and per sequence: 256 prompts × n = 2 generate 512 sequences, each up
        # to the cap; a list of prompts reserved once was 19× the hard limit (issue #23.4).
        call.max_output_tokens = output_bound(
            body, call.kind, per_sequence=int(given or settings.CACHEPLANE_GATEWAY_MAX_TOKENS)
        )
        prefix = cache.prefix_message if cache is not None else None
        call.prompt_tokens_bound = prompt_bound(call) + (
            len(json.dumps(prefix).encode()) if prefix else 0
        )
        call.estimated_tokens = prompt_estimate(call) + call.max_output_tokens

    def pool_before_route(self, call: Call) -> str | None:
        """The workers' pool when they all share one (the usual fleet): the price does
        not wait for the routing decision then."""
        pools = {w.pool for w in directory.serving(call.model)}
        return pools.pop() if len(pools) == 1 else None

    async def route(self, call: Call) -> Target:
        workers = directory.serving(call.model)
        if not workers:
            raise GatewayError(503, "no_worker", f"No healthy worker serves {call.model!r}.")
        if call.priority == "batch" and pool_under_pressure(workers):
            raise GatewayError(
                429,
                "kv_memory_pressure",
                "The worker pool's KV cache is above 85 % used; retry batch work later.",
                headers={"Retry-After": "5"},
            )
        meter_extra = call.extra
        chain: list[str] = []
        cache = call.cache
        if cache is not None:
            candidates = order_candidates(
                key=cache.routing_key,
                workers=workers,
                inflight=directory.inflight,
                preferred=None,
            )[:MAX_FAILOVER]
            meter_extra["predicted_hit"] = candidates[0].name in cache.placement
            prefix = cache.prefix_message
            assert prefix is not None, "a vLLM cache always records its prefix message"
            meter_extra["available_tokens"] = len(prefix["content"]) // 4
            hit = meter_extra["predicted_hit"]
            meter_extra["routed_tokens"] = meter_extra["available_tokens"] if hit else 0
            meter_extra["route"] = "cache"  # a named cache: its placement decides
        else:
            # Event-exact when the KV indexer's view is fresh, else the character guess
            # (gateway.routing.route_request decides and counts which).
            decision = await route_request(
                body=call.upstream_body if isinstance(call.upstream_body, dict) else call.body,
                kind=call.kind,
                text=_prompt_text(call),
                workers=workers,
                salt=call.identity.cache_salt,
                tenant_id=call.identity.tenant_id,
                session=call.session,
                inflight=directory.inflight,
                approx_index=prefix_index,
                replica=directory.replica,
            )
            candidates = decision.candidates[:MAX_FAILOVER]
            chain = decision.chain
            meter_extra["available_tokens"] = decision.available_tokens
            meter_extra["predicted_hit"] = decision.available_tokens > 0
            meter_extra["routed_tokens"] = decision.routed_tokens
            meter_extra["route"] = f"{decision.mode}:{decision.reason}"
        meter_extra["chain"] = chain
        first = candidates[0]
        return Target(
            pool=first.pool,
            share_key=f"vllm:{call.model}",
            capacity=len(workers) * settings.CACHEPLANE_GATEWAY_WORKER_CONCURRENCY,
            worker=first.name,
            state=candidates,
        )

    async def send(self, call: Call, target: Target) -> Upstream:
        path = "/v1/chat/completions" if call.kind == "chat" else "/v1/completions"
        headers = {"X-Request-Id": call.request_id}
        if settings.CACHEPLANE_VLLM_API_KEY:
            headers["Authorization"] = f"Bearer {settings.CACHEPLANE_VLLM_API_KEY}"
        worker, response = await _send(target.state, path, call.upstream_body, headers)
        target.worker, target.pool = worker.name, worker.pool

        async def close() -> None:
            await response.aclose()
            directory.release(worker.name)

        if response.status_code != 200:
            raw = await _read(response, close)
            raise reshape_error(response.status_code, raw, response.headers)
        if not call.stream:
            raw = await _read(response, close)
            payload = _json_or_none(raw)
            if not isinstance(payload, dict):
                raise GatewayError(
                    502, "upstream_error", "The worker returned an invalid response."
                )
            _usage_into(call.usage, payload.get("usage"))
            if call.extra.get("chain"):
                prefix_index.record(call.extra["chain"], worker.name)
            return Upstream(body=raw, headers={"x-cacheplane-worker": worker.name})
        result = Upstream(headers={"x-cacheplane-worker": worker.name}, close=close)
        result.events = self._relay(call, response, worker, result)
        return result

    async def _relay(
        self, call: Call, response: upstream.Response, worker: WorkerView, result: Upstream
    ) -> AsyncIterator[bytes]:
        """SSE events for the client: usage kept for metering, shown only as asked."""
        continuous, wants_usage = call.extra["continuous"], call.client_wants_usage
        async for event in upstream.sse_events(response):
            data = upstream.parse_sse_event(event)
            if data is None:
                if b"[DONE]" in event:
                    result.completed = True
                    if call.extra.get("chain"):
                        prefix_index.record(call.extra["chain"], worker.name)
                yield event
                continue
            usage = data.get("usage")
            if usage:
                _usage_into(call.usage, usage)
            choices = data.get("choices")
            if call.ttft_ms is None and choices:
                call.ttft_ms = int((time.perf_counter() - call.started) * 1000)
            if "error" in data and not choices:
                yield event  # a mid-stream error: the status line is long gone
                continue
            if continuous and wants_usage:
                yield event
            elif not choices:  # the final usage-only chunk
                if wants_usage:
                    yield event
            elif "usage" in data:
                data.pop("usage")
                yield b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
            else:
                yield event


async def _read(response: upstream.Response, close: Callable[[], Awaitable[None]]) -> bytes:
    """The whole body, then the connection back to the pool (or closed)."""
    try:
        return await response.aread()
    except upstream.UpstreamTimeout:
        raise GatewayError(504, "upstream_timeout", "The worker did not answer in time.") from None
    except upstream.UpstreamError as exc:
        raise GatewayError(502, "upstream_error", f"The worker connection failed: {exc}") from None
    finally:
        await close()


def _prompt_text(call: Call) -> str:
    from gateway.requests import prompt_text

    return prompt_text(call.body, call.kind)


def _usage_into(usage: Usage, reported: Any) -> None:
    if not isinstance(reported, dict):
        return
    usage.prompt_tokens = _int(reported.get("prompt_tokens"))
    usage.output_tokens = _int(reported.get("completion_tokens"))
    details = reported.get("prompt_tokens_details") or {}
    usage.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    usage.cached_tokens = min(usage.cached_tokens, usage.prompt_tokens)
    usage.reported = True


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def reshape_error(status: int, raw: bytes, headers: Mapping[str, str]) -> GatewayError:
    """A worker's error answer in the gateway's shape, its status and Retry-After kept."""
    payload = _json_or_none(raw)
    message, param = f"The worker answered {status}.", None
    if isinstance(payload, dict):
        error = payload.get("error")
        inner = error if isinstance(error, dict) else payload
        if isinstance(inner.get("message"), str):
            message = inner["message"][:2000]
        if isinstance(inner.get("param"), str):
            param = inner["param"][:200]
    passed = {}
    if headers.get("retry-after"):
        passed["Retry-After"] = headers["retry-after"][:32]
    if status == 429:
        return GatewayError(429, "upstream_rate_limited", message, param=param, headers=passed)
    if status in (400, 404, 413, 422):
        return GatewayError(
            400 if status == 422 else status, "upstream_rejected", message, param=param
        )
    if status == 503:
        return GatewayError(503, "upstream_unavailable", message, headers=passed)
    return GatewayError(502, "upstream_error", f"The worker answered {status}: {message}")


async def _send(
    candidates: list[WorkerView], path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[WorkerView, upstream.Response]:
    """Send to the first candidate that accepts a connection (failover on connect errors).

    A connection that breaks before the worker answered anything (the worker closed it
    without sending a response, or reset it while the request was written or the answer
    awaited) is sent once more, to the same worker on a connection opened for it:
    typically a kept-alive connection the worker closed for idleness just as the gateway
    reused it (connections that went idle together after a burst are closed together, so
    another pooled one may be closing too). Nothing has reached the client then, and a
    request that did run twice costs the worker a prefill but books only the answer the
    client gets. Once per request; a second break is the 502 it always was.
    """
    last_error = "no candidate"
    retried = False
    for worker in candidates:
        while True:
            directory.acquire(worker.name)
            try:
                sent = headers
                if worker.api_key:  # the worker's own --api-key, from the registry
                    sent = {**headers, "Authorization": f"Bearer {worker.api_key}"}
                response = await upstream.post(
                    worker.base_url + path, json=body, headers=sent, fresh=retried
                )
                return worker, response
            except upstream.ConnectFailed as exc:
                directory.release(worker.name)
                prefix_index.forget_worker(worker.name)
                last_error = f"{worker.name}: {exc}"
                break
            except upstream.UpstreamTimeout:
                directory.release(worker.name)
                raise GatewayError(
                    504, "upstream_timeout", "The worker did not answer in time."
                ) from None
            except upstream.ConnectionDropped as exc:
                directory.release(worker.name)
                if retried:
                    raise GatewayError(
                        502, "upstream_error", f"The worker connection failed: {exc}"
                    ) from None
                retried = True
                UPSTREAM_RETRIES.labels(reason=exc.reason).inc()
            except upstream.UpstreamError as exc:
                directory.release(worker.name)
                raise GatewayError(
                    502, "upstream_error", f"The worker connection failed: {exc}"
                ) from None
            except BaseException:  # cancelled (the client went away): not in flight any more
                directory.release(worker.name)
                raise
    raise GatewayError(
        503, "upstream_unavailable", f"No worker accepted the request ({last_error})."
    )
