"""Byte-level tokenizer and chat template of the reference model.

Ids 0-255 are the UTF-8 bytes themselves, 256 is ``<|bos|>`` and 257 ``<|eos|>``. Every
string round-trips, token counts are predictable (one per byte), and nothing is downloaded.
Like Hugging Face tokenizers, the special tokens' text forms inside a prompt are parsed as
the special ids, so a rendered chat template tokenizes to exactly what the model sees.

Chat template (deterministic, one line per marker)::

    <|bos|><|system|>\\n{content}<|eos|>\\n<|user|>\\n{content}<|eos|>\\n<|assistant|>\\n

Each message renders as ``<|{role}|>\\n{content}<|eos|>\\n``; ``add_generation_prompt``
appends ``<|assistant|>\\n``; ``continue_final_message`` leaves the last message open (no
``<|eos|>\\n``, no generation prompt). Role markers are plain text, not special ids.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from typing import Any

BOS_TOKEN_ID = 256
EOS_TOKEN_ID = 257
VOCAB_SIZE = 258
SPECIAL_TOKENS: dict[str, int] = {"<|bos|>": BOS_TOKEN_ID, "<|eos|>": EOS_TOKEN_ID}
_SPECIAL_TEXT = {v: k for k, v in SPECIAL_TOKENS.items()}
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_TOKENS) + ")")


def encode(text: str, *, add_special_tokens: bool = True) -> list[int]:
    """Tokenize ``text``; ``add_special_tokens`` prepends BOS as vLLM does for completions."""
    ids = [BOS_TOKEN_ID] if add_special_tokens else []
    for piece in _SPECIAL_SPLIT.split(text):
        if piece in SPECIAL_TOKENS:
            ids.append(SPECIAL_TOKENS[piece])
        elif piece:
            ids.extend(piece.encode("utf-8"))
    return ids


def decode(token_ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
    """Detokenize; invalid UTF-8 (a random model emits any byte) becomes U+FFFD."""
    out: list[str] = []
    buf = bytearray()
    for tid in token_ids:
        if tid < 256:
            buf.append(tid)
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        if not skip_special_tokens:
            out.append(_SPECIAL_TEXT.get(tid, ""))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


def token_str(token_id: int) -> str:
    """The display string of one token, as ``/tokenize`` returns with ``return_token_strs``."""
    if token_id in _SPECIAL_TEXT:
        return _SPECIAL_TEXT[token_id]
    return bytes([token_id]).decode("latin-1")


def validate_token_ids(token_ids: Sequence[Any]) -> list[int]:
    """Return the ids as ints or raise ValueError naming the first one out of the vocabulary."""
    out: list[int] = []
    for tid in token_ids:
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < VOCAB_SIZE:
            raise ValueError(f"Token id {tid!r} is out of vocabulary (0..{VOCAB_SIZE - 1})")
        out.append(tid)
    return out


class IncrementalDetokenizer:
    """Turns a growing stream of token ids into text deltas without splitting UTF-8 sequences.

    Streaming must never emit half a multi-byte character, so bytes pass through an
    incremental UTF-8 decoder; special tokens are skipped, as vLLM does by default.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        if token_id >= 256:
            return ""
        return self._decoder.decode(bytes([token_id]))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def message_text(content: Any) -> str:
    """Flatten OpenAI message content (a string or a list of text parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                text = part.get("text")
                if not isinstance(text, str):
                    raise ValueError("text content parts need a string 'text'")
                parts.append(text)
            else:
                raise ValueError("only text content parts are supported by this model")
        return "\n".join(parts)
    raise ValueError("message content must be a string or a list of content parts")


def render_chat(
    messages: Sequence[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> str:
    """Render chat messages with the template in the module docstring."""
    if continue_final_message and add_generation_prompt:
        raise ValueError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    out = ["<|bos|>"]
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError("each message needs a string 'role'")
        out.append(f"<|{message['role']}|>\n{message_text(message.get('content'))}")
        if not (continue_final_message and i == len(messages) - 1):
            out.append("<|eos|>\n")
    if add_generation_prompt:
        out.append("<|assistant|>\n")
    return "".join(out)
