"""Fixtures for the reference-worker suite: tiny model configs and in-process servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.workers.engine.support import tiny_config
from workers.engine.engine import Engine
from workers.engine.launcher import RunningWorker, serve


@pytest.fixture
def make_engine() -> Iterator[Callable[..., Engine]]:
    """Start engines built from :func:`tiny_config` keywords; all are shut down afterwards."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        engine = Engine(tiny_config(**kwargs)).start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()


@pytest.fixture
def make_worker() -> Iterator[Callable[..., RunningWorker]]:
    """Start HTTP workers (``dev_mode=`` plus :func:`tiny_config` keywords)."""
    with ExitStack() as stack:

        def make(*, dev_mode: bool | None = None, **kwargs: Any) -> RunningWorker:
            return stack.enter_context(serve(tiny_config(**kwargs), dev_mode=dev_mode))

        yield make


@pytest.fixture
def worker(make_worker: Callable[..., RunningWorker]) -> RunningWorker:
    """One worker with prompt-token details on, as Cacheplane runs vLLM."""
    return make_worker(enable_prompt_tokens_details=True)


@pytest.fixture(autouse=True)
def _fresh_key_cache() -> None:
    """Shadow the root conftest's autouse fixture of the same name for this package.

    That fixture clears the control plane's API-key cache and so imports Django models;
    this suite runs with ``-p no:django`` (the worker has no Django), and caches no keys.
    """
    return
