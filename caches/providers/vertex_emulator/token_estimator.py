"""The emulator's deterministic token count, exposed so the control plane can pre-check a cache.

Real Gemini tokenisation is not reproducible offline, so the emulator uses a rule anyone can
recompute: **tokens = ceil(bytes / 4)**, where *bytes* is the UTF-8 size of

* the ``text`` of every part of ``systemInstruction`` and of each entry of ``contents``;
* for a part without ``text`` (``inlineData``, ``fileData``, ``functionCall`` …), its canonical
  JSON (keys sorted, no spaces, UTF-8);
* the canonical JSON of the ``tools`` list, when it is not empty.

``toolConfig`` is not counted. The sum is taken over all those bytes first and rounded up once,
so splitting a text across parts does not change the count. Inputs are the REST (camelCase)
dictionaries the SDK sends; google-genai pydantic objects are accepted too and dumped by alias,
which is what the SDK puts on the wire for text, and close to it for tools.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

BYTES_PER_TOKEN = 4


def _plain(value: Any) -> Any:
    """Turn a google-genai pydantic object into its wire dict; leave plain data alone."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _canonical_json_size(value: Any) -> int:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


def _part_size(part: Any) -> int:
    part = _plain(part)
    if isinstance(part, str):
        return len(part.encode("utf-8"))
    if isinstance(part, Mapping) and isinstance(part.get("text"), str):
        return len(part["text"].encode("utf-8"))
    return _canonical_json_size(part)


def _content_size(content: Any) -> int:
    content = _plain(content)
    if isinstance(content, str):
        # The SDK turns a bare string into a one-part user Content; count it the same.
        return len(content.encode("utf-8"))
    if not isinstance(content, Mapping):
        return _canonical_json_size(content)
    return sum(_part_size(part) for part in content.get("parts") or [])


def _content_chars(content: Any) -> int:
    content = _plain(content)
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, Mapping):
        return 0
    total = 0
    for part in content.get("parts") or []:
        part = _plain(part)
        if isinstance(part, str):
            total += len(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            total += len(part["text"])
    return total


def _is_audio(part: Any) -> bool:
    if not isinstance(part, Mapping):
        return False
    for key in ("fileData", "file_data", "inlineData", "inline_data"):
        data = part.get(key)
        if isinstance(data, Mapping):
            mime = data.get("mimeType", data.get("mime_type"))
            return isinstance(mime, str) and mime.startswith("audio/")
    return False


def estimate_audio_tokens(contents: Iterable[Any] | None) -> int:
    """The audio part of :func:`estimate_cached_content_tokens` (for ``…TokensDetails``):
    the canonical JSON size of every ``fileData`` / ``inlineData`` part with an ``audio/*``
    MIME type, rounded up once. Real Vertex counts 32 tokens per second of audio; the
    emulator has no decoder, so it uses the same byte rule as for every other part."""
    size = 0
    for content in contents or []:
        content = _plain(content)
        if isinstance(content, Mapping):
            for part in content.get("parts") or []:
                part = _plain(part)
                if _is_audio(part):
                    size += _canonical_json_size(part)
    return tokens_for_bytes(size)


def tokens_for_bytes(size: int) -> int:
    """Tokens for a byte count: ``ceil(size / 4)``."""
    return math.ceil(size / BYTES_PER_TOKEN)


def estimate_text_tokens(text: str) -> int:
    """Tokens for one string: ``ceil(utf8_bytes / 4)``."""
    return tokens_for_bytes(len(text.encode("utf-8")))


def prompt_size_bytes(
    *,
    system_instruction: Any = None,
    contents: Iterable[Any] | None = None,
    tools: Iterable[Any] | None = None,
) -> int:
    """The byte total the estimator rounds; see the module docstring for what counts."""
    size = 0
    if system_instruction is not None:
        size += _content_size(system_instruction)
    for content in contents or []:
        size += _content_size(content)
    tool_list = [_plain(tool) for tool in tools or []]
    if tool_list:
        size += _canonical_json_size(tool_list)
    return size


def estimate_cached_content_tokens(
    *,
    system_instruction: Any = None,
    contents: Iterable[Any] | None = None,
    tools: Iterable[Any] | None = None,
) -> int:
    """The ``usageMetadata.totalTokenCount`` the emulator reports for a cache with these inputs.

    Pure and deterministic: the control plane may call it before creating a cache to check the
    per-model minimum (see ``model_catalog``) without a round trip.
    """
    return tokens_for_bytes(
        prompt_size_bytes(system_instruction=system_instruction, contents=contents, tools=tools)
    )


def estimate_body_tokens(body: Mapping[str, Any]) -> int:
    """Tokens for a REST body holding ``systemInstruction``, ``contents`` and ``tools``."""
    return estimate_cached_content_tokens(
        system_instruction=body.get("systemInstruction"),
        contents=body.get("contents"),
        tools=body.get("tools"),
    )


def text_character_count(
    *, system_instruction: Any = None, contents: Iterable[Any] | None = None
) -> int:
    """Characters of text in the inputs; reported as ``usageMetadata.textCount``."""
    total = _content_chars(system_instruction) if system_instruction is not None else 0
    return total + sum(_content_chars(content) for content in contents or [])
