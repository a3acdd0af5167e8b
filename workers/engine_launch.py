"""``cacheplane worker``: run a worker and register it with the control plane.

- ``--engine reference`` (default): the embedded reference worker (``workers.engine``),
  with the usual vLLM-style flags.
- ``--engine vllm``: real vLLM (``pip install 'cacheplane[vllm]'``), launched with the
  flags Cacheplane relies on (``--enable-prompt-tokens-details``, KV events over ZMQ,
  ``sha256_cbor`` block hashing with a pinned ``PYTHONHASHSEED``).
- ``--register NAME --advertise-url URL``: record the worker in the control plane's
  database (the command runs where DATABASE_URL reaches it) before serving.
- ``--dry-run``: print the command that would run (and register), then exit.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cacheplane worker", add_help=False)
    parser.add_argument("--engine", choices=("reference", "vllm"), default="reference")
    parser.add_argument("--register", metavar="NAME")
    parser.add_argument("--advertise-url", metavar="URL")
    parser.add_argument("--pool", default="default")
    # PUB[,REPLAY] as the KV indexer reads it (a `*` host becomes the advertised host).
    parser.add_argument("--kv-events-endpoint", default="")
    parser.add_argument("--dry-run", action="store_true")
    return parser


def _flag(rest: list[str], name: str, default: str | None = None) -> str | None:
    for i, item in enumerate(rest):
        if item == name and i + 1 < len(rest):
            return rest[i + 1]
        if item.startswith(name + "="):
            return item.split("=", 1)[1]
    return default


def build_command(engine: str, rest: list[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment for the chosen engine."""
    if engine == "reference":
        return [sys.executable, "-m", "workers.engine.cli", *rest], {}
    from workers.engine.vllm_command import vllm_command, vllm_env

    model = _flag(rest, "--model") or (rest[0] if rest and not rest[0].startswith("-") else None)
    if not model:
        raise SystemExit("cacheplane worker --engine vllm needs --model MODEL")
    argv = vllm_command(
        model,
        port=int(_flag(rest, "--port", "8000") or 8000),
        host=_flag(rest, "--host"),
        served_model_name=_flag(rest, "--served-model-name"),
        block_size=int(_flag(rest, "--block-size", "16") or 16),
        max_model_len=int(v) if (v := _flag(rest, "--max-model-len")) else None,
        # The replay socket lets the KV indexer fill a gap in the event stream (and
        # rebuild a worker's entry after the indexer restarts) instead of resetting it.
        kv_events_replay_endpoint="tcp://*:5558",
    )
    # The control plane calls workers with CACHEPLANE_VLLM_API_KEY; vLLM must demand it
    # (VLLM_API_KEY, in the environment rather than argv where `ps` would show it).
    return argv, vllm_env(api_key=os.environ.get("CACHEPLANE_VLLM_API_KEY") or None)


def worker_main(argv: list[str]) -> int:
    """Entry point of ``cacheplane worker``."""
    args, rest = _parser().parse_known_args(argv)
    command, extra_env = build_command(args.engine, rest)
    model = _flag(rest, "--served-model-name") or _flag(rest, "--model") or "cacheplane/ref-tiny"
    if args.register:
        if not args.advertise_url:
            print("cacheplane worker: --register needs --advertise-url", file=sys.stderr)
            return 2
        _register(
            args.register,
            args.advertise_url,
            model,
            args.pool,
            args.engine,
            kv_events_endpoint=args.kv_events_endpoint,
        )
    if args.dry_run:
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(extra_env.items()))
        print((env_text + " " if env_text else "") + shlex.join(command))
        return 0
    if args.engine == "reference":
        from workers.engine.cli import main as engine_main

        return engine_main(rest)
    return subprocess.call(command, env={**os.environ, **extra_env})


def _register(
    name: str, url: str, model: str, pool: str, engine: str, *, kv_events_endpoint: str
) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from tenants.actor import Actor
    from workers.services import worker_register

    worker = worker_register(
        actor=Actor.cli(),
        name=name,
        base_url=url,
        model=model,
        pool=pool,
        engine=engine,
        kv_events_endpoint=kv_events_endpoint,
    )
    print(f"registered worker {worker.name} ({worker.model}) at {worker.base_url}")
