"""Hash a request's prompt exactly as the worker's engine will: the key to the KV index.

The gateway must predict the block hashes vLLM will store for a prompt: the same tokens
(the worker's tokenizer and chat template), the same block size, the same hash algorithm
and seed, and the tenant's ``cache_salt`` in block 0's extra keys. The hashes are compared
in the form KV events carry them (the low 64 bits of each digest).

What to hash with is a :class:`HashSpec`, derived per worker from what it declared and
reported (``workers.hash_config.worker_hash_spec``). Its ``tokenizer`` is a key: the
reference worker's byte-level tokenizer (``"reference"``) is built in; any other key is a
path to a model directory or ``tokenizer.json`` (``workers.hf_tokenizer``), loaded once per
process; :func:`register_tokenizer` adds others. When the tokenizer is unknown or does not
load, :func:`request_block_hashes` answers ``None`` and the gateway routes on its
character-based guess (the fallback mode, with the reason counted and shown).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.engine.hashing import block_extra_keys, event_hash, hash_function

logger = logging.getLogger(__name__)

# (body, kind) -> token ids, or None when the body cannot be rendered.
Tokenize = Callable[[dict[str, Any], str], list[int] | None]
MAX_HASHED_TOKENS = 16_384  # longer prompts: the first blocks decide the route anyway
MEMO_BLOCKS = 200_000

# (parent digest, block tokens) -> (digest, event hash); block 0's key also carries the
# algorithm and the salt (its parent, hash(seed), is the same for every tenant). Traffic
# shares prefixes (that is why it is routed by them), so most blocks of a request were
# hashed before: one dict lookup per block (well under a microsecond) instead of CBOR +
# SHA-256 (about 11 us with cbor2). FIFO-bounded.
_memo: dict[tuple[Any, ...], tuple[bytes, int]] = {}
_roots: dict[tuple[str, str], bytes] = {}


def _reference_tokenize(body: dict[str, Any], kind: str) -> list[int] | None:
    """The reference worker's tokens for ``body`` (``openai_protocol.chat_prompt`` and
    ``completion_prompts``, without importing the engine: the gateway has no torch)."""
    from workers.engine import tokenizer

    def flag(name: str, default: bool) -> bool:
        value = body.get(name, default)
        return value if isinstance(value, bool) else default

    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        try:
            text = tokenizer.render_chat(
                messages,
                add_generation_prompt=flag("add_generation_prompt", True),
                continue_final_message=flag("continue_final_message", False),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return tokenizer.encode(text, add_special_tokens=flag("add_special_tokens", False))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return tokenizer.encode(
            prompt, add_special_tokens=body.get("add_special_tokens") is not False
        )
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return list(prompt)
    return None


REFERENCE = "reference"
_TOKENIZERS: dict[str, Tokenize] = {REFERENCE: _reference_tokenize}
# Paths that did not load, and when: retried after a minute (a volume mounted late).
_FAILED: dict[str, float] = {}
RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class HashSpec:
    """Everything that decides a worker's block hashes besides the prompt and the salt."""

    tokenizer: str  # "reference", or a model directory / tokenizer.json path
    block_size: int
    algo: str = "sha256_cbor"
    seed: str = "0"
    salt_form: str = "tagged"


#: The reference worker's defaults (``cacheplane worker``): tests and benches use it.
REFERENCE_SPEC = HashSpec(tokenizer=REFERENCE, block_size=16)


def register_tokenizer(key: str, tokenize: Tokenize) -> None:
    """Teach the gateway a tokenizer under ``key`` (a worker's ``tokenizer`` field)."""
    _TOKENIZERS[key] = tokenize
    _FAILED.pop(key, None)


def tokenizer_for(key: str) -> Tokenize | None:
    """The tokenizer registered as ``key``, loading a path on first use; None if it fails."""
    found = _TOKENIZERS.get(key)
    if found is not None or not key:
        return found
    failed_at = _FAILED.get(key)
    if failed_at is not None and time.monotonic() - failed_at < RETRY_SECONDS:
        return None
    from workers.hf_tokenizer import TokenizerUnavailable, load_tokenizer

    try:
        loaded = load_tokenizer(key)
    except TokenizerUnavailable as exc:
        logger.warning("tokenizer %s does not load: %s", key, exc)
        _FAILED[key] = time.monotonic()
        return None
    register_tokenizer(key, loaded)
    return loaded


def request_block_hashes(
    body: dict[str, Any], *, kind: str, spec: HashSpec, salt: str | None
) -> list[int] | None:
    """The KV-event hashes of every full block of the prompt, or None if unknown here."""
    tokenize = tokenizer_for(spec.tokenizer)
    if tokenize is None:
        return None
    ids = tokenize(body, kind)
    if not ids:
        return None
    return block_hashes(
        ids,
        salt=salt,
        block_size=spec.block_size,
        hash_seed=spec.seed,
        algo=spec.algo,
        salt_form=spec.salt_form,
    )


def block_hashes(
    ids: list[int],
    *,
    salt: str | None,
    block_size: int,
    hash_seed: str = "0",
    algo: str = "sha256_cbor",
    salt_form: str = "tagged",
) -> list[int]:
    """KV-event hashes of the full blocks of ``ids`` (memoized per block, see ``_memo``)."""
    ids = ids[:MAX_HASHED_TOKENS]
    full = len(ids) // block_size
    if not full:
        return []
    root_key = (algo, hash_seed)
    parent = _roots.get(root_key)
    if parent is None:
        parent = _roots[root_key] = hash_function(algo)(hash_seed)
    out: list[int] = []
    memo = _memo
    for index in range(full):
        block = tuple(ids[index * block_size : (index + 1) * block_size])
        key = (parent, block) if index else (algo, parent, block, salt, salt_form)
        entry = memo.get(key)
        if entry is None:
            digest = _digest(parent, block, block_extra_keys(index, salt, salt_form), algo)
            entry = memo[key] = (digest, event_hash(digest))
            if len(memo) > MEMO_BLOCKS:
                del memo[next(iter(memo))]  # the oldest entry (dicts keep insertion order)
        parent = entry[0]
        out.append(entry[1])
    return out


def _digest(parent: bytes, block: tuple[int, ...], extra: Any, algo: str) -> bytes:
    """The engine's own hash of one block (``cbor2`` canonical encoding for sha256_cbor)."""
    return hash_function(algo)((parent, block, extra))
