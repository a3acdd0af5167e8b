"""``python -m caches.providers.vertex_emulator``: serve the emulator until interrupted.

Used by ``cacheplane up`` for a local Vertex, and by hand. ``--state-file`` keeps demo caches
across restarts; ``--allow-token`` and ``--model`` configure tenants and models.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import uvicorn

from .emulator import VertexEmulator
from .model_catalog import DEFAULT_MIN_CACHE_TOKENS

DEFAULT_PORT = 8765


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m caches.providers.vertex_emulator",
        description="Local emulator of Vertex AI cachedContents and generateContent.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (%(default)s)")
    parser.add_argument("--state-file", help="JSON file that keeps caches across restarts")
    parser.add_argument(
        "--allow-token",
        action="append",
        default=[],
        type=_key_value,
        metavar="PROJECT=TOKEN",
        help="accept only these bearer tokens for PROJECT (repeatable)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        type=_key_value,
        metavar="MODEL=MIN_TOKENS",
        help="add or override a model and its minimum cacheable tokens (repeatable)",
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level (info)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and serve until interrupted; returns the exit status."""
    args = build_parser().parse_args(argv)
    models = dict(DEFAULT_MIN_CACHE_TOKENS)
    for model_id, minimum in args.model:
        try:
            models[model_id] = int(minimum)
        except ValueError:
            build_parser().error(f"--model {model_id}: {minimum!r} is not an integer")
    tokens: dict[str, list[str]] = {}
    for project, token in args.allow_token:
        tokens.setdefault(project, []).append(token)
    emulator = VertexEmulator(
        min_cache_tokens=models, state_file=args.state_file, tokens_by_project=tokens
    )
    print(f"Vertex emulator serving http://{args.host}:{args.port} (/v1, /v1beta1, /_emulator)")
    uvicorn.run(emulator.app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
