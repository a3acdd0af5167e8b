"""What each worker's prefix-cache block hashes depend on, and whether we can reproduce them.

Event-exact routing predicts a prompt's block hashes and looks them up in the KV index; it
is only as good as the prediction. The inputs come from the worker's declared engine and
version (the salt's form in block 0's extra keys), what it reports (``block_size`` and
``prefix_caching_hash_algo`` in ``vllm:cache_config_info``, recorded by the probe), its
configuration (the hash seed, its ``PYTHONHASHSEED``) and its model's tokenizer. A worker
for which any is unknown gets no spec and a reason: the gateway routes it approximately
and the console shows why.

Versions: vLLM 0.32 is tested (``tests/workers/real_vllm``); it tags the salt
(``("cache_salt", salt)``). vLLM's source up to mid-2026 (about 0.22) used the bare salt;
releases between are assumed tagged, and the KV indexer's hash check (``hash_check``)
shows a mismatch on the workers page if that is wrong.
"""

from __future__ import annotations

import re

from workers.engine.hashing import HASH_FUNCTIONS
from workers.models import Worker
from workers.request_hashing import REFERENCE, HashSpec

#: Why a worker has no hash spec (also the gateway's ``route_total{reason}`` label).
REASONS = {
    "no_tokenizer": "no tokenizer is configured for its model (register it with --tokenizer)",
    "not_probed": "its hash algorithm is not known yet (the probe reads cache_config_info)",
    "unsupported_hash_algo": "it hashes with an algorithm Cacheplane does not reproduce",
    "hash_seed_unknown": "it runs without PYTHONHASHSEED on a release that seeds randomly",
}
LAST_BARE_SALT = (0, 22)
#: vLLM 0.32 without PYTHONHASHSEED seeds SHA-256 hashing with this fixed string
#: (``DEFAULT_NONE_HASH_SEED`` in ``vllm/v1/core/kv_cache_utils.py``); earlier releases
#: seeded from random bytes, and xxhash always does.
VLLM_DEFAULT_SEED = "vllm-none-hash"
FIXED_DEFAULT_SEED_SINCE = (0, 32)


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def salt_form(*, engine: str, version: str) -> str:
    """How ``engine`` at ``version`` puts the salt in block 0's extra keys."""
    parsed = _version(version)
    if engine == "vllm" and parsed is not None and parsed <= LAST_BARE_SALT:
        return "bare"
    return "tagged"


def worker_hash_spec(worker: Worker) -> tuple[HashSpec | None, str]:
    """The worker's :class:`HashSpec`, or None and a key of :data:`REASONS`."""
    tokenizer = REFERENCE if worker.engine == "reference" else worker.tokenizer
    if not tokenizer:
        return None, "no_tokenizer"
    # The reference worker's default until a probe reads what it runs with.
    algo = worker.hash_algo or ("sha256_cbor" if worker.engine == "reference" else "")
    if not algo:
        return None, "not_probed"
    if algo not in HASH_FUNCTIONS:
        return None, "unsupported_hash_algo"
    seed = worker.hash_seed
    if not seed:  # PYTHONHASHSEED unset on the worker
        version = _version(worker.engine_version)
        if worker.engine != "vllm" or version is None or version < FIXED_DEFAULT_SEED_SINCE:
            return None, "hash_seed_unknown"
        seed = VLLM_DEFAULT_SEED
    spec = HashSpec(
        tokenizer=tokenizer,
        block_size=worker.block_size or 16,
        algo=algo,
        seed=seed,
        salt_form=salt_form(engine=worker.engine, version=worker.engine_version),
    )
    return spec, ""
