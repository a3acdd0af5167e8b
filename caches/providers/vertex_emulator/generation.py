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
from .token_estimator import (
    estimate_audio_tokens,
    estimate_body_tokens,
    estimate_text_tokens,
    text_character_count,
)
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


def _modality_counts(count: int, audio: int = 0) -> list[dict[str, Any]]:
    """Vertex's per-modality breakdown: TEXT, and AUDIO where the input holds audio."""
    details = [{"modality": "TEXT", "tokenCount": count - audio}] if count - audio else []
    if audio:
        details.append({"modality": "AUDIO", "tokenCount": audio})
    return details


def _blocked(
    model_id: str, prompt_tokens: int, audio: int, reason: str, now: Any
) -> dict[str, Any]:
    """What Vertex answers for a prompt its safety filters block: no candidates, the
    reason in ``promptFeedback``, and the prompt still counted (and billed)."""
    return {
        "promptFeedback": {
            "blockReason": reason,
            "blockReasonMessage": "The prompt was blocked by the emulator's blocked terms.",
        },
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "totalTokenCount": prompt_tokens,
            "promptTokensDetails": _modality_counts(prompt_tokens, audio),
            "trafficType": "ON_DEMAND",
        },
        "modelVersion": model_id,
        "createTime": format_timestamp(now),
    }


def generate_content(
    *,
    caches: CachedContentService,
    catalog: ModelCatalog,
    project: str,
    location: str,
    model_id: str,
    body: Any,
    blocked_terms: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Answer a GenerateContentRequest, optionally against a cache.

    A last user text containing one of ``blocked_terms`` is answered as Vertex answers a
    prompt its safety filters block (``promptFeedback.blockReason``, no candidates).

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
    cached_audio = 0
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
        cached_audio = min(cached_tokens, estimate_audio_tokens(record.contents))
        cache_label = f" with {record.name}"
    new_prompt_tokens = estimate_body_tokens(body)
    prompt_tokens = cached_tokens + new_prompt_tokens
    prompt_audio = cached_audio + min(new_prompt_tokens, estimate_audio_tokens(contents))
    echo = _last_user_text(contents)[:ECHO_LIMIT]
    if any(term in _last_user_text(contents) for term in blocked_terms):
        return _blocked(model_id, prompt_tokens, prompt_audio, "PROHIBITED_CONTENT", caches.now())
    text = f"[vertex-emulator] {model_id}{cache_label}: {echo}"
    candidate_tokens = estimate_text_tokens(text)
    usage: dict[str, Any] = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": candidate_tokens,
        "totalTokenCount": prompt_tokens + candidate_tokens,
        "promptTokensDetails": _modality_counts(prompt_tokens, prompt_audio),
        "candidatesTokensDetails": _modality_counts(candidate_tokens),
        "trafficType": "ON_DEMAND",
    }
    if cached_tokens:
        usage["cachedContentTokenCount"] = cached_tokens
        usage["cacheTokensDetails"] = _modality_counts(cached_tokens, cached_audio)
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
