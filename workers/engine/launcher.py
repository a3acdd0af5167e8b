"""Run a reference worker in-process: uvicorn in a background thread on a free local port.

Tests and benchmarks use :func:`serve` to get a real HTTP server (and a real engine, block
pool and ZMQ publisher) without spawning processes::

    with serve(EngineConfig(...)) as worker:
        httpx.get(f"{worker.base_url}/v1/models")
        worker.engine.snapshot()
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from workers.engine.config import EngineConfig
from workers.engine.engine import Engine
from workers.engine.server import create_app


@dataclass
class RunningWorker:
    base_url: str
    engine: Engine
    app: Starlette

    @property
    def kv_events_endpoint(self) -> str | None:
        """The PUB socket's resolved address (``tcp://127.0.0.1:*`` becomes a real port)."""
        return self.engine.publisher.endpoint

    @property
    def kv_events_replay_endpoint(self) -> str | None:
        return self.engine.publisher.replay_endpoint


@contextmanager
def serve(
    config: EngineConfig,
    *,
    dev_mode: bool | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    registry: CollectorRegistry | None = None,
    log_level: str = "warning",
    startup_timeout: float = 30.0,
) -> Iterator[RunningWorker]:
    """Start engine and server, yield the running worker, and stop both on exit."""
    engine = Engine(config, registry=registry).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    thread: threading.Thread | None = None
    server: uvicorn.Server | None = None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        app = create_app(engine, dev_mode=dev_mode)
        server = uvicorn.Server(
            uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False)
        )
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the reference worker's HTTP server did not start")
            time.sleep(0.01)
        bound_port = sock.getsockname()[1]
        yield RunningWorker(base_url=f"http://{host}:{bound_port}", engine=engine, app=app)
    finally:
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=15)
        sock.close()
        engine.shutdown()
