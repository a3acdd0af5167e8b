"""Does a worker hash blocks the way we predict? Checked on its own KV events (no Django)."""

from __future__ import annotations

from typing import Any

from workers.engine.hashing import event_hash, hash_function, hashed_extra_keys
from workers.request_hashing import HashSpec


def check_first_blocks(events: list[dict[str, Any]], spec: HashSpec) -> tuple[int, int]:
    """Recompute each chain's first block from a ``BlockStored`` event's own token ids and
    extra keys with ``spec`` (algorithm, seed, salt form); (matched, mismatched).

    The tokens come from the event, so this checks what the gateway cannot see on its own:
    the worker's hash algorithm, seed and salt form. Salted chain starts are checked too:
    vLLM 0.32 publishes the salt untagged (``(salt,)``) while it hashes the tagged pair
    ``("cache_salt", salt)`` (``hashed_extra_keys``); recomputing from the published keys
    as they stand was the false mismatch that once made this check skip salted blocks.
    Events without ``token_ids`` or ``extra_keys`` (older releases), or with extra keys
    other than a salt (LoRA, multimodal), are not counted.
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
        try:
            keys = hashed_extra_keys(extra[0], spec.salt_form)
        except ValueError:
            continue
        digest = hash_fn((root, tuple(tokens[:size]), keys))
        sent = hashes[0]
        sent_int = int.from_bytes(bytes(sent)[-8:], "big") if isinstance(sent, bytes) else sent
        if event_hash(digest) == sent_int:
            ok += 1
        else:
            bad += 1
    return ok, bad
