"""Run an emulator inside the current process, on a free 127.0.0.1 port, for tests.

The socket is bound here (port 0) and handed to uvicorn, so the port is known before the
server starts and no other process can take it in between. uvicorn runs its own event loop in
a daemon thread; leaving the ``with`` block asks it to exit and waits for the thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from .emulator import VertexEmulator


@contextlib.contextmanager
def running_vertex_emulator(
    emulator: VertexEmulator | None = None,
    *,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 10.0,
    **emulator_options: Any,
) -> Iterator[tuple[str, VertexEmulator]]:
    """Serve ``emulator`` (or a new one built from ``emulator_options``) in a thread.

    Yields ``(base_url, emulator)``; ``base_url`` (``http://127.0.0.1:PORT``) is what goes into
    ``HttpOptions(base_url=…)``. Raises RuntimeError if uvicorn does not come up in time.
    """
    if emulator is None:
        emulator = VertexEmulator(**emulator_options)
    elif emulator_options:
        raise TypeError("pass either an emulator or options to build one, not both")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        emulator.app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        loop="asyncio",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"vertex-emulator-{port}", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the Vertex emulator failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Vertex emulator did not start in {startup_timeout_s}s")
            time.sleep(0.005)  # polling uvicorn's start flag; uvicorn offers no event
        yield f"http://{host}:{port}", emulator
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
