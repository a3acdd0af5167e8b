"""``publishers/google/models/{model}:generateContent`` (and ``countTokens``) without a model.

The answer is deterministic, so tests can assert on it: the candidate echoes the model, the
cache (if any) and the last user text, and the token counts follow ``token_estimator``. What
matters for the control plane is the usage block, shaped like Vertex's (spec §1.6):
``promptTokenCount`` *includes* ``cachedContentTokenCount``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .cached_contents import CachedContentService
from .model_catalog import ModelCatalog, ModelName, parse_model_name
from .rpc_errors import (
    CACHE_WITH_GENERATION_FIELDS_MESSAGE,
    cached_content_not_found,
    invalid_argument,
    publisher_model_not_found,
)
from .token_estimator import estimate_body_tokens, estimate_text_tokens, text_character_count
from .wire_time import format_timestamp

ECHO_LIMIT = 200  # characters of the last user text echoed back


def _last_user_text(contents: list[Any]) -> str:
    for content in reversed(contents):
        if isinstance(content, Mapping) and content.get("role", "user") == "user":
            texts = [
                part["text"]
                for part in content.get("parts") or []
                if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            ]
            if texts:
                return " ".join(texts)
    return ""


def _check_model(catalog: ModelCatalog, model: ModelName) -> None:
    if not catalog.is_known(model.model_id):
        raise publisher_model_not_found(model.full)


def _uses_generation_fields(body: Mapping[str, Any]) -> bool:
    """Whether the request sets systemInstruction, tools or toolConfig (empty lists don't)."""
    system_instruction = body.get("systemInstruction", body.get("system_instruction"))
    tools = body.get("tools")
    tool_config = body.get("toolConfig", body.get("tool_config"))
    return system_instruction is not None or bool(tools) or tool_config is not None


def _modality_counts(count: int) -> list[dict[str, Any]]:
    return [{"modality": "TEXT", "tokenCount": count}] if count else []


def generate_content(
    *,
    caches: CachedContentService,
    catalog: ModelCatalog,
    project: str,
    location: str,
    model_id: str,
    body: Any,
) -> dict[str, Any]:
    """Answer a GenerateContentRequest, optionally against a cache.

    Raises 400 when ``cachedContent`` is combined with systemInstruction/tools/toolConfig
    (spec §1.6 wording), when contents are empty, or when the cache belongs to another model;
    404 for an unknown model or an unknown/expired cache. A cache in another project or
    location is reported as not found rather than revealed.
    """
    if not isinstance(body, Mapping):
        raise invalid_argument("Invalid JSON payload received. Expected an object.")
    model = ModelName(project=project, location=location, model_id=model_id)
    _check_model(catalog, model)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        # Wording as seen in public bug reports against Vertex; not quoted by the spec.
        raise invalid_argument("Unable to submit request because it has an empty contents field.")
    cache_ref = body.get("cachedContent", body.get("cached_content"))
    cached_tokens = 0
    cache_label = ""
    if cache_ref is not None:
        if _uses_generation_fields(body):
            raise invalid_argument(CACHE_WITH_GENERATION_FIELDS_MESSAGE)
        if not isinstance(cache_ref, str):
            raise invalid_argument("cached_content must be a resource name string.")
        if not cache_ref.startswith(f"projects/{project}/locations/{location}/cachedContents/"):
            raise cached_content_not_found(cache_ref)
        record = caches.live(cache_ref)
        cache_model = parse_model_name(record.model)
        if cache_model is None or cache_model.model_id != model_id:
            # Our wording; the Gemini API says the two models "have to be the same".
            raise invalid_argument(
                f"Model used by GenerateContent request ({model.full}) and CachedContent "
                f"({record.model}) has to be the same."
            )
        cached_tokens = record.total_token_count
        cache_label = f" with {record.name}"
    new_prompt_tokens = estimate_body_tokens(body)
    prompt_tokens = cached_tokens + new_prompt_tokens
    echo = _last_user_text(contents)[:ECHO_LIMIT]
    text = f"[vertex-emulator] {model_id}{cache_label}: {echo}"
    candidate_tokens = estimate_text_tokens(text)
    usage: dict[str, Any] = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": candidate_tokens,
        "totalTokenCount": prompt_tokens + candidate_tokens,
        "promptTokensDetails": _modality_counts(prompt_tokens),
        "candidatesTokensDetails": _modality_counts(candidate_tokens),
        "trafficType": "ON_DEMAND",
    }
    if cached_tokens:
        usage["cachedContentTokenCount"] = cached_tokens
        usage["cacheTokensDetails"] = _modality_counts(cached_tokens)
    now = caches.now()
    digest = hashlib.sha256(
        json.dumps(body, sort_keys=True, default=str).encode("utf-8")
        + format_timestamp(now).encode("ascii")
    ).hexdigest()[:24]
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": usage,
        "modelVersion": model_id,
        "createTime": format_timestamp(now),
        "responseId": digest,
    }


def count_tokens(
    *, catalog: ModelCatalog, project: str, location: str, model_id: str, body: Any
) -> dict[str, Any]:
    """Answer ``:countTokens`` with the emulator's estimate (cached tokens are not included)."""
    if not isinstance(body, Mapping):
        raise invalid_argument("Invalid JSON payload received. Expected an object.")
    _check_model(catalog, ModelName(project=project, location=location, model_id=model_id))
    total = estimate_body_tokens(body)
    return {
        "totalTokens": total,
        "totalBillableCharacters": text_character_count(
            system_instruction=body.get("systemInstruction"), contents=body.get("contents")
        ),
        "promptTokensDetails": _modality_counts(total),
    }
