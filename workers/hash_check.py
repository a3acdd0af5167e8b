"""Does a worker hash blocks the way we predict? Checked on its own KV events (no Django)."""

from __future__ import annotations

from typing import Any

from workers.engine.hashing import event_hash, hash_function
from workers.request_hashing import HashSpec


def _tuples(value: Any) -> Any:
    """msgpack decodes tuples as lists; vLLM hashed tuples (pickle tells them apart)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list | tuple) else value


def check_first_blocks(events: list[dict[str, Any]], spec: HashSpec) -> tuple[int, int]:
    """Recompute each chain's first block from a ``BlockStored`` event's own token ids and
    extra keys with ``spec`` (algorithm, seed, salt form); (matched, mismatched).

    The tokens come from the event, so this checks what the gateway cannot see on its own:
    the worker's hash algorithm and seed. Only unsalted chain starts are recomputed (see
    below); events without ``token_ids`` or ``extra_keys`` (older releases) are not counted.
    """
    ok = bad = 0
    hash_fn = hash_function(spec.algo)
    root = hash_fn(spec.seed)
    for event in events:
        if event.get("type") != "BlockStored" or event.get("parent_block_hash") is not None:
            continue
        hashes, tokens = event.get("block_hashes") or [], event.get("token_ids") or []
        extra = event.get("extra_keys")
        size = event.get("block_size") or spec.block_size
        if not hashes or len(tokens) < size or not isinstance(extra, list) or not extra:
            continue
        keys = _tuples(extra[0])
        if keys is not None:
            # Salted chain starts are not checked: against real vLLM 0.32 the salted
            # first block's extra keys as decoded here did not always recompute to the
            # sent hash although the gateway's predictions matched 100 % (see
            # docs/vllm-protocol.md); an unsalted start checks algorithm and seed alone.
            continue
        digest = hash_fn((root, tuple(tokens[:size]), keys))
        sent = hashes[0]
        sent_int = int.from_bytes(bytes(sent)[-8:], "big") if isinstance(sent, bytes) else sent
        if event_hash(digest) == sent_int:
            ok += 1
        else:
            bad += 1
    return ok, bad
