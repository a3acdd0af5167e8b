"""OpenAI-compatible request parsing and response shapes, following vLLM's serving layer.

Validation happens here, before anything reaches the engine, so a bad request costs no
engine work. Errors use vLLM's nested shape ``{"error": {"message", "type", "param",
"code"}}``; request-validation failures are typed ``"Bad Request"`` (vLLM's handler for
pydantic errors), semantic ones raised while serving ``"BadRequestError"``, an unknown model
``"NotFoundError"`` (404).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from workers.engine import tokenizer
from workers.engine.parameters import unsupported_parameters
from workers.engine.request import RequestOutput, SamplingParams


class APIError(Exception):
    """An error answered in vLLM's error shape."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.err_type, self.status, self.param)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def invalid(message: str, param: str | None = None) -> APIError:
    return APIError(message, err_type="Bad Request", param=param)


@dataclass
class GenerationRequest:
    """A validated completions or chat request, ready to hand to the engine."""

    model: str
    prompts: list[list[int]]
    prompt_texts: list[str | None]
    sampling: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    cache_salt: str | None
    request_id: str | None
    echo: bool = False


def _get(
    body: dict[str, Any], key: str, kinds: type | tuple[type, ...], default: Any = None
) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # bool is an int in Python, but JSON true is not a number to OpenAI's schema.
    if isinstance(value, bool) and bool not in kinds:
        raise invalid(f"'{key}' has the wrong type", key)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise invalid(f"'{key}' must be of type {names}", key)
    return value


def resolve_model(body: dict[str, Any], served: tuple[str, ...]) -> str:
    model: str | None = _get(body, "model", str)
    if model is None:
        return served[0]
    if model not in served:
        raise APIError(
            f"The model `{model}` does not exist.",
            status=404,
            err_type="NotFoundError",
            param="model",
        )
    return model


def cache_salt_of(body: dict[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise invalid(
            "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt"
        )
    return salt


def completion_prompts(body: dict[str, Any]) -> tuple[list[list[int]], list[str | None]]:
    """Accept a string, a token list, or a batch of either; tokenize with BOS prepended."""
    prompt = body.get("prompt")
    add_special = body.get("add_special_tokens", True) is not False
    if isinstance(prompt, str):
        batch: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        batch = [prompt]
    elif isinstance(prompt, list) and prompt:
        batch = prompt
    else:
        raise invalid("'prompt' must be a non-empty string, token list, or list of them", "prompt")
    prompts: list[list[int]] = []
    texts: list[str | None] = []
    for item in batch:
        if isinstance(item, str):
            ids = tokenizer.encode(item, add_special_tokens=add_special)
            texts.append(item)
        elif isinstance(item, list) and item:
            try:
                ids = tokenizer.validate_token_ids(item)
            except ValueError as exc:
                raise APIError(str(exc), param="prompt") from None
            texts.append(None)
        else:
            raise invalid("each prompt must be a non-empty string or token list", "prompt")
        if not ids:
            raise APIError("The prompt cannot be empty.", param="prompt")
        prompts.append(ids)
    return prompts, texts


def chat_prompt(body: dict[str, Any]) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list", "messages")
    try:
        text = tokenizer.render_chat(
            messages,
            add_generation_prompt=_get(body, "add_generation_prompt", bool, True),
            continue_final_message=_get(body, "continue_final_message", bool, False),
        )
    except ValueError as exc:
        raise invalid(str(exc), "messages") from None
    return tokenizer.encode(text, add_special_tokens=_get(body, "add_special_tokens", bool, False))


def sampling_params(
    body: dict[str, Any], *, prompt_lens: list[int], max_model_len: int, chat: bool
) -> SamplingParams:
    """Build sampling parameters and apply vLLM's context-length checks to every prompt."""
    longest = max(prompt_lens)
    if longest >= max_model_len:
        raise APIError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {longest} input tokens. Please reduce the length of the input "
            "messages.",
            param="messages" if chat else "prompt",
        )
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") else "max_tokens"
    max_tokens = _get(body, key, int)
    if max_tokens is not None:
        if max_tokens < 1:
            raise invalid(f"'{key}' must be at least 1, got {max_tokens}.", key)
        if longest + max_tokens > max_model_len:
            raise APIError(
                f"'{key}' is too large: {max_tokens}. This model's maximum context length is "
                f"{max_model_len} tokens and your request has {longest} input tokens "
                f"({max_tokens} > {max_model_len} - {longest}).",
                param=key,
            )
    else:
        room = max_model_len - longest
        max_tokens = room if chat else min(16, room)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (
        isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)
    ):
        raise invalid("'stop' must be a string or a list of non-empty strings", "stop")
    stop_ids = _get(body, "stop_token_ids", list, [])
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise invalid("'stop_token_ids' must be a list of integers", "stop_token_ids")
    temperature = _get(body, "temperature", float, 1.0)
    top_p = _get(body, "top_p", float, 1.0)
    if temperature < 0:
        raise invalid(f"temperature must be non-negative, got {temperature}.", "temperature")
    if not 0 < top_p <= 1:
        raise invalid(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=max(_get(body, "top_k", int, 0), 0),
        seed=_get(body, "seed", int),
        min_tokens=_get(body, "min_tokens", int, 0),
        stop=tuple(stop or ()),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=_get(body, "ignore_eos", bool, False),
        include_stop_str_in_output=_get(body, "include_stop_str_in_output", bool, False),
    )


def parse_generation(
    body: dict[str, Any], *, served: tuple[str, ...], max_model_len: int, chat: bool
) -> GenerationRequest:
    model = resolve_model(body, served)
    salt = cache_salt_of(body)
    texts: list[str | None]
    if chat:
        prompts, texts = [chat_prompt(body)], [None]
    else:
        prompts, texts = completion_prompts(body)
    _reject_unsupported(body)
    stream = _get(body, "stream", bool, False)
    options = _get(body, "stream_options", dict)
    if options is not None and not stream:
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")
    options = options or {}
    n = _get(body, "n", int, 1)
    if n < 1:
        raise invalid("n must be at least 1.", "n")
    return GenerationRequest(
        model=model,
        prompts=prompts,
        prompt_texts=texts,
        sampling=sampling_params(
            body, prompt_lens=[len(p) for p in prompts], max_model_len=max_model_len, chat=chat
        ),
        n=n,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("continuous_usage_stats")),
        cache_salt=salt,
        request_id=_get(body, "request_id", str),
        echo=not chat and _get(body, "echo", bool, False),
    )


def _reject_unsupported(body: dict[str, Any]) -> None:
    """Refuse, rather than silently ignore, features whose output the worker cannot produce."""
    for name in unsupported_parameters(body):
        raise APIError(f"'{name}' is not supported by the reference worker", param=name)


def new_request_id() -> str:
    return uuid.uuid4().hex


def now() -> int:
    return int(time.time())


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, *, details_enabled: bool
) -> dict[str, Any]:
    """``usage`` as vLLM 0.32 fills it: details whenever enabled, a miss as 0 (not null)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": ({"cached_tokens": cached_tokens} if details_enabled else None),
    }


def finish_fields(out: RequestOutput | None) -> dict[str, Any]:
    if out is None or not out.finished:
        return {"finish_reason": None, "stop_reason": None}
    return {"finish_reason": str(out.finish_reason), "stop_reason": out.stop_reason}


def model_card(name: str, *, root: str, max_model_len: int, created: int) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": f"modelperm-{uuid.uuid4().hex}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
