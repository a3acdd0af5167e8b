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

    The tokens and the salt come from the event, so this checks exactly what the gateway
    cannot see on its own: the worker's hash algorithm and seed, and the shape of its salt
    key. Events without ``token_ids`` or ``extra_keys`` (older releases) are not counted.
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
        salt = keys[0] if isinstance(keys, tuple) and len(keys) == 1 else None
        tagged = isinstance(salt, tuple) and len(salt) == 2 and salt[0] == "cache_salt"
        if salt is not None and tagged != (spec.salt_form == "tagged"):
            bad += 1  # the salt's shape differs from what the gateway will hash
            continue
        digest = hash_fn((root, tuple(tokens[:size]), keys))
        sent = hashes[0]
        sent_int = int.from_bytes(bytes(sent)[-8:], "big") if isinstance(sent, bytes) else sent
        if event_hash(digest) == sent_int:
            ok += 1
        else:
            bad += 1
    return ok, bad
