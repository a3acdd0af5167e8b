"""Hash a request's prompt exactly as the worker's engine will: the key to the KV index.

The gateway must predict the block hashes vLLM will store for a prompt: the same tokens
(the worker's tokenizer and chat template), the same block size, the same hash algorithm
and seed, and the tenant's ``cache_salt`` in block 0's extra keys. The hashes are compared
in the form KV events carry them (the low 64 bits of each digest).

Tokenizers are looked up by engine: the reference worker's byte-level tokenizer is built in.
A real vLLM worker needs its Hugging Face tokenizer in the gateway; until one is
registered with :func:`register_tokenizer`, :func:`request_block_hashes` answers ``None``
and the gateway routes on its character-based guess (the fallback mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.engine.hashing import block_hash_chain, event_hash

# (body, kind) -> token ids, or None when the body cannot be rendered.
Tokenize = Callable[[dict[str, Any], str], list[int] | None]
MAX_HASHED_TOKENS = 16_384  # longer prompts: the first blocks decide the route anyway


def _reference_tokenize(body: dict[str, Any], kind: str) -> list[int] | None:
    from workers.engine.openai_protocol import APIError, chat_prompt, completion_prompts

    try:
        if kind == "chat":
            return chat_prompt(body)
        prompts, _texts = completion_prompts(body)
    except APIError:
        return None
    return prompts[0] if len(prompts) == 1 else None


_TOKENIZERS: dict[str, Tokenize] = {"reference": _reference_tokenize}


def register_tokenizer(engine: str, tokenize: Tokenize) -> None:
    """Teach the gateway an engine's tokenizer (e.g. a Hugging Face chat template)."""
    _TOKENIZERS[engine] = tokenize


def request_block_hashes(
    body: dict[str, Any],
    *,
    kind: str,
    engine: str,
    salt: str | None,
    block_size: int,
    hash_seed: str = "0",
    algo: str = "sha256_cbor",
) -> list[int] | None:
    """The KV-event hashes of every full block of the prompt, or None if unknown here."""
    tokenize = _TOKENIZERS.get(engine)
    if tokenize is None:
        return None
    ids = tokenize(body, kind)
    if not ids:
        return None
    digests = block_hash_chain(
        ids[:MAX_HASHED_TOKENS],
        block_size=block_size,
        cache_salt=salt,
        hash_seed=hash_seed,
        algo=algo,
    )
    return [event_hash(d) for d in digests]
