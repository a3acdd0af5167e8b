"""The argv and environment that launch *real* vLLM the way Cacheplane expects to drive it.

Production workers must expose what the control plane reads from the reference worker:
``cached_tokens`` in usage, KV events over ZMQ, and block hashes that the control plane can
reproduce. Hence ``sha256_cbor`` (language-independent, the same serialization as
:mod:`workers.engine.hashing`) and a pinned ``PYTHONHASHSEED`` (vLLM seeds ``NONE_HASH``
from it; unset, older releases seed from ``os.urandom`` and hashes differ per restart).
"""

from __future__ import annotations

import json
from collections.abc import Sequence


def vllm_command(
    model: str,
    *,
    port: int = 8000,
    host: str | None = None,
    served_model_name: str | None = None,
    block_size: int = 16,
    kv_events_endpoint: str | None = "tcp://*:5557",
    kv_events_replay_endpoint: str | None = None,
    kv_events_topic: str = "",
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory_bytes: int | None = None,
    enable_prefix_caching: bool = True,
    extra_args: Sequence[str] = (),
    executable: str = "vllm",
) -> list[str]:
    """Build ``vllm serve MODEL ...``; pure, so the registration code can show or log it.

    Pass the API key through :func:`vllm_env` (``VLLM_API_KEY``) rather than argv, where
    any local user could read it from the process list.
    """
    argv = [executable, "serve", model, "--port", str(port)]
    if host is not None:
        argv += ["--host", host]
    if served_model_name is not None:
        argv += ["--served-model-name", served_model_name]
    argv += [
        "--block-size",
        str(block_size),
        "--enable-prompt-tokens-details",
        "--prefix-caching-hash-algo",
        "sha256_cbor",
    ]
    argv.append(
        "--enable-prefix-caching" if enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if kv_events_endpoint is not None:
        events: dict[str, object] = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": kv_events_endpoint,
            "topic": kv_events_topic,
        }
        if kv_events_replay_endpoint is not None:
            events["replay_endpoint"] = kv_events_replay_endpoint
        argv += ["--kv-events-config", json.dumps(events, separators=(",", ":"))]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(kv_cache_memory_bytes)]
    return argv + list(extra_args)


def vllm_env(
    *, hash_seed: str = "0", api_key: str | None = None, dev_mode: bool = False
) -> dict[str, str]:
    """Environment additions for :func:`vllm_command` (merge into ``os.environ``)."""
    env = {"PYTHONHASHSEED": hash_seed, "VLLM_SERVER_DEV_MODE": "1" if dev_mode else "0"}
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key
    return env
