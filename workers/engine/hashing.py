"""Prefix-cache block hashing, byte-for-byte as vLLM computes it.

vLLM hashes every *full* block as ``H_i = hash_fn((H_{i-1}, tuple(block_tokens), extra))``
with ``H_{-1} = NONE_HASH = hash_fn(seed)`` (``seed`` is ``PYTHONHASHSEED`` in vLLM). ``extra``
is a tuple of extra keys or ``None``; the only one the reference worker knows is the salt,
which enters block 0 alone (later blocks inherit isolation through the chain) as the tagged
pair ``("cache_salt", salt)``: what vLLM 0.32 hashes (measured against its KV events,
``tests/workers/real_vllm/test_hash_conformance.py``). Releases before the tagged keys
(vLLM's source up to mid-2026) used the bare salt; :data:`SALT_KEY_FORMS` names both.

Two serializations are implemented, named as vLLM's ``--prefix-caching-hash-algo`` values:

* ``sha256_cbor`` (the default here): SHA-256 over canonical CBOR (RFC 8949 4.2.1),
  written by ``cbor2.dumps(x, canonical=True)`` as vLLM does. Reproducible in any language,
  and identical to real vLLM launched with ``--prefix-caching-hash-algo sha256_cbor`` and the
  same ``PYTHONHASHSEED``, block size and token ids.
* ``sha256``: SHA-256 over ``pickle.dumps(x, protocol=HIGHEST_PROTOCOL)``, vLLM's default;
  reproducible only from Python.

:func:`block_hash_chain` is the pure function the control plane uses to predict hashes.
KV events carry :func:`event_hash` of a digest: its low 64 bits, as vLLM sends them.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cbor2

HashFn = Callable[[Any], bytes]


def cbor_encode(obj: Any) -> bytes:
    """Canonical CBOR (RFC 8949 4.2.1) of ``obj``: ``cbor2.dumps(obj, canonical=True)``.

    The very call vLLM's ``sha256_cbor`` makes, so the bytes (and the hashes) match by
    construction rather than by a second implementation of the encoding.
    """
    return cbor2.dumps(obj, canonical=True)


def sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor_encode(obj)).digest()


def sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


HASH_FUNCTIONS: dict[str, HashFn] = {"sha256_cbor": sha256_cbor, "sha256": sha256_pickle}


def hash_function(algo: str) -> HashFn:
    try:
        return HASH_FUNCTIONS[algo]
    except KeyError:
        raise ValueError(
            f"unsupported prefix caching hash algorithm {algo!r}; choose one of "
            f"{sorted(HASH_FUNCTIONS)}"
        ) from None


def none_hash(seed: str, algo: str = "sha256_cbor") -> bytes:
    """vLLM's ``NONE_HASH``: the parent hash of block 0, ``hash_fn(seed)``."""
    return hash_function(algo)(seed)


#: How the salt enters block 0's extra keys: ``tagged`` = ``(("cache_salt", salt),)`` (vLLM
#: 0.32, the reference worker), ``bare`` = ``(salt,)`` (earlier releases).
SALT_KEY_FORMS = ("tagged", "bare")


def block_extra_keys(
    block_index: int, cache_salt: str | None, salt_form: str = "tagged"
) -> tuple[Any, ...] | None:
    """Extra keys of one block: the salt entry for block 0 when salted, else ``None``.

    vLLM skips an empty salt (``if request.cache_salt``), so ``""`` is unsalted too.
    """
    if block_index == 0 and cache_salt:
        return (("cache_salt", cache_salt),) if salt_form == "tagged" else (cache_salt,)
    return None


def event_extra_keys(block_index: int, cache_salt: str | None) -> tuple[Any, ...] | None:
    """Extra keys of one block as a KV event publishes them: vLLM 0.32 hashes the tagged
    pair but publishes every extra key untagged (``to_event_extra_keys`` in
    ``vllm/v1/core/kv_cache_utils.py``: "Events keep that format until consumers handle
    the tagged keys"), so the salt appears bare, ``(salt,)``."""
    return block_extra_keys(block_index, cache_salt, "bare")


def hashed_extra_keys(event_keys: Any, salt_form: str = "tagged") -> tuple[Any, ...] | None:
    """Block 0's hashed extra keys from the ones its event published (:func:`event_extra_keys`):
    ``None`` stays ``None``, a lone salt is hashed in ``salt_form``. Raises ValueError for
    anything else (LoRA names, multimodal or prompt-embedding keys: not reproduced here)."""
    if event_keys is None:
        return None
    keys = tuple(event_keys) if isinstance(event_keys, list | tuple) else (event_keys,)
    if len(keys) != 1 or not isinstance(keys[0], str):
        raise ValueError(f"extra keys other than a cache salt: {keys!r}")
    return block_extra_keys(0, keys[0], salt_form)


def hash_block_tokens(
    hash_fn: HashFn,
    parent_hash: bytes,
    block_token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None,
) -> bytes:
    return hash_fn((parent_hash, tuple(block_token_ids), extra_keys))


def event_hash(digest: bytes) -> int:
    """The int a KV event carries for a block hash: the digest's last 8 bytes, big-endian."""
    return int.from_bytes(digest[-8:], "big")


class BlockHasher:
    """Extends one request's hash chain as its token list grows (prompt, then output)."""

    def __init__(
        self,
        *,
        block_size: int,
        algo: str = "sha256_cbor",
        hash_seed: str = "0",
    ) -> None:
        self.block_size = block_size
        self.algo = algo
        self.hash_fn = hash_function(algo)
        self.none_hash = self.hash_fn(hash_seed)

    def extend(
        self, hashes: list[bytes], token_ids: Sequence[int], cache_salt: str | None
    ) -> list[bytes]:
        """Append the hashes of blocks that became full in ``token_ids``; return the new ones."""
        bs = self.block_size
        added: list[bytes] = []
        for index in range(len(hashes), len(token_ids) // bs):
            parent = hashes[-1] if hashes else self.none_hash
            digest = hash_block_tokens(
                self.hash_fn,
                parent,
                token_ids[index * bs : (index + 1) * bs],
                block_extra_keys(index, cache_salt),
            )
            hashes.append(digest)
            added.append(digest)
        return added


def block_hash_chain(
    token_ids: Sequence[int],
    *,
    block_size: int = 16,
    cache_salt: str | None = None,
    hash_seed: str = "0",
    algo: str = "sha256_cbor",
) -> list[bytes]:
    """Digests of every full block of ``token_ids``, as the worker (and vLLM) computes them.

    Pure and deterministic: the control plane calls it to predict which blocks a prompt will
    hit and to match them against ``BlockStored`` events (compare ``event_hash(digest)``).
    """
    hashes: list[bytes] = []
    BlockHasher(block_size=block_size, algo=algo, hash_seed=hash_seed).extend(
        hashes, token_ids, cache_salt
    )
    return hashes
