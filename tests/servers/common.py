"""What the local provider servers share: a clock tests can move, the tokenizer, a
uvicorn runner in a thread, SSE framing.

Tokenizer (the servers' own, so tests can price by hand): a text of ``n`` characters is
``ceil(n / 4)`` tokens; any other block (a tool definition, a tool call, a tool result)
is its compact JSON's characters / 4, rounded up. Output tokens are the 4-character
``"tok "`` each, so a streamed text of ``c`` characters is exactly ``c / 4`` tokens.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

OUTPUT_TOKEN = "tok "


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def block_tokens(block: Any) -> int:
    if isinstance(block, dict) and block.get("type") == "text":
        return text_tokens(block.get("text") or "")
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return math.ceil(len(json.dumps(block, sort_keys=True, separators=(",", ":"))) / 4)


def canonical(value: Any) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Clock:
    """Wall time plus an offset tests and benchmarks move (no sleeping)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


@contextlib.contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """``app`` under uvicorn on a free local port, in a thread; yields its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "local provider server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
