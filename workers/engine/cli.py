"""Command line of the reference worker, with vLLM's flag names where vLLM has one.

``python -m workers.engine.cli --port 8001 --enable-prompt-tokens-details`` serves the
default model; ``cacheplane worker`` delegates to :func:`main`. Flags the reference worker
adds (model shape, seeds, threads) are documented in ``--help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import uvicorn

from workers.engine.config import (
    SUPPORTED_HASH_ALGOS,
    CacheConfig,
    EngineConfig,
    ModelConfig,
    parse_size,
)
from workers.engine.engine import Engine
from workers.engine.kv_events import KVEventsConfig
from workers.engine.server import create_app

DEFAULT_MODEL = "cacheplane/ref-tiny"


def _env_flag(name: str) -> bool:
    # vLLM parses these as bool(int(value)), so "true" is an error there too.
    return bool(int(os.environ.get(name, "0")))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cacheplane worker",
        description="Cacheplane reference worker: a vLLM-compatible paged-KV engine in torch.",
    )
    p.add_argument("model_tag", nargs="?", help="model name, as in `vllm serve MODEL`")
    p.add_argument("--model", default=None, help=f"model name (default {DEFAULT_MODEL})")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", action="append", default=None, help="repeatable; or VLLM_API_KEY")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", default="auto", help="auto (= float32), float32, bfloat16, float16")
    p.add_argument("--seed", type=int, default=0, help="sampling seed of unseeded requests")
    p.add_argument("--max-model-len", type=parse_size, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=64)
    cache = p.add_argument_group("KV cache")
    cache.add_argument("--block-size", type=int, default=16)
    cache.add_argument(
        "--kv-cache-memory",
        "--kv-cache-memory-bytes",
        dest="kv_cache_memory",
        type=parse_size,
        default=parse_size("64M"),
        help="KV pool size in bytes; suffixes K/M/G are binary, k/m/g decimal (default 64M)",
    )
    cache.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help="auto, float32, bfloat16, float16, fp8 (= fp8_e4m3), fp8_e5m2",
    )
    cache.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True
    )
    cache.add_argument(
        "--prefix-caching-hash-algo", choices=SUPPORTED_HASH_ALGOS, default="sha256_cbor"
    )
    cache.add_argument(
        "--hash-seed",
        default=os.environ.get("PYTHONHASHSEED", "0"),
        help="seed of NONE_HASH, like vLLM's PYTHONHASHSEED (default: that variable, else 0)",
    )
    cache.add_argument(
        "--kv-events-config",
        default=None,
        help='vLLM\'s JSON; plus "encoding": "map"|"array" (Cacheplane extension)',
    )
    api = p.add_argument_group("API")
    api.add_argument("--enable-prompt-tokens-details", action="store_true")
    api.add_argument("--enable-server-load-tracking", action="store_true")
    api.add_argument("--enable-request-id-headers", action="store_true")
    api.add_argument(
        "--dev-mode",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="register /reset_prefix_cache, /sleep, ... (default: VLLM_SERVER_DEV_MODE)",
    )
    api.add_argument("--uvicorn-log-level", default="info")
    model = p.add_argument_group("reference model shape")
    defaults = ModelConfig()
    for flag, attr in (
        ("--num-layers", "num_layers"),
        ("--hidden-size", "hidden_size"),
        ("--num-heads", "num_heads"),
        ("--num-kv-heads", "num_kv_heads"),
        ("--head-dim", "head_dim"),
        ("--intermediate-size", "intermediate_size"),
        ("--max-position-embeddings", "max_position_embeddings"),
        ("--weight-seed", "weight_seed"),
    ):
        model.add_argument(flag, dest=attr, type=int, default=getattr(defaults, attr))
    model.add_argument("--num-threads", type=int, default=None, help="torch CPU threads")
    return p


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """Translate parsed flags into an :class:`EngineConfig`; raise ValueError if invalid."""
    if args.model_tag and args.model and args.model_tag != args.model:
        raise ValueError("give the model either positionally or with --model, not both")
    dtype = "float32" if args.dtype == "auto" else args.dtype
    events = KVEventsConfig.from_json(args.kv_events_config) if args.kv_events_config else None
    keys = args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else [])
    dev_mode = _env_flag("VLLM_SERVER_DEV_MODE") if args.dev_mode is None else args.dev_mode
    return EngineConfig(
        model=args.model_tag or args.model or DEFAULT_MODEL,
        served_model_names=tuple(args.served_model_name or ()),
        model_config=ModelConfig(
            num_layers=args.num_layers,
            hidden_size=args.hidden_size,
            num_heads=args.num_heads,
            num_kv_heads=args.num_kv_heads,
            head_dim=args.head_dim,
            intermediate_size=args.intermediate_size,
            max_position_embeddings=args.max_position_embeddings,
            weight_seed=args.weight_seed,
            dtype=dtype,
        ),
        cache_config=CacheConfig(
            block_size=args.block_size,
            kv_cache_memory_bytes=args.kv_cache_memory,
            cache_dtype=args.kv_cache_dtype,
            enable_prefix_caching=args.enable_prefix_caching,
            prefix_caching_hash_algo=args.prefix_caching_hash_algo,
            hash_seed=args.hash_seed,
        ),
        device=args.device,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        seed=args.seed,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        enable_server_load_tracking=args.enable_server_load_tracking,
        enable_request_id_headers=args.enable_request_id_headers,
        kv_events=events,
        api_keys=tuple(keys),
        dev_mode=dev_mode,
        num_threads=args.num_threads,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, start the engine and serve until interrupted; 2 on a bad configuration."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
        config.validate()
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    engine = Engine(config).start()
    log = logging.getLogger("workers.engine")
    log.info(
        "reference worker %s: %d KV blocks of %d tokens (%d bytes/token), max_model_len %d",
        config.model_name,
        config.num_gpu_blocks,
        config.cache_config.block_size,
        config.kv_bytes_per_token,
        config.resolved_max_model_len,
    )
    if engine.publisher.endpoint:
        log.info("KV events on %s", engine.publisher.endpoint)
    try:
        uvicorn.run(
            create_app(engine),
            host=args.host,
            port=args.port,
            log_level=args.uvicorn_log_level,
            lifespan="off",
        )
    finally:
        engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
