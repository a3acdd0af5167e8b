"""Real vLLM servers for the tests in this folder (session-scoped: started once per run).

The environment is installed on first use (``runtime.ensure_env``; minutes, then cached
under ``~/.cache/cacheplane``). Where it cannot be installed or started, CI (``CI=true``)
fails these tests; a developer's run skips them with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers.real_vllm.runtime import (
    VllmServer,
    VllmUnavailable,
    build_tiny_model,
    ensure_env,
    free_port,
)

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"real vLLM is required in CI: {reason}", pytrace=False)
    pytest.skip(f"real vLLM unavailable here: {reason}")


@pytest.fixture(scope="session")
def vllm_version() -> str:
    try:
        return ensure_env()
    except (VllmUnavailable, OSError) as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture(scope="session")
def tiny_model(vllm_version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
    except VllmUnavailable as exc:
        _unavailable(str(exc))
        raise


def _ready(server: VllmServer, *, tries: int = 3) -> None:
    """Wait for ``server``; one that lost a port to another process ("Address already in
    use": a port is only reserved once vLLM binds it) starts again on new ports."""
    for attempt in range(tries):
        try:
            server.wait_ready()
            return
        except VllmUnavailable as exc:
            if "Address already in use" not in str(exc) or attempt == tries - 1:
                raise
            server.stop()
            server.port, server.events_port, server.replay_port = (
                free_port(),
                free_port(),
                free_port(),
            )
            server.start()


def _started(servers: list[VllmServer]) -> Iterator[list[VllmServer]]:
    try:
        for server in servers:
            server.start()
        for server in servers:
            _ready(server)
    except VllmUnavailable as exc:
        for server in servers:
            server.stop()
        _unavailable(str(exc))
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def vllm_servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list]:
    """Three real vLLM servers of the tiny model, started together (start-up dominates):
    two as ``cacheplane worker --engine vllm`` runs them (``sha256_cbor``,
    ``PYTHONHASHSEED=0``) and one with vLLM's defaults (``sha256``, no PYTHONHASHSEED).
    KV events bound, with replay."""
    logs = tmp_path_factory.mktemp("vllm-logs")
    servers = [VllmServer(tiny_model, name=f"vllm-{n}", log_path=logs / f"{n}.log") for n in (0, 1)]
    servers.append(
        VllmServer(
            tiny_model, name="vllm-d", hash_algo="sha256", hash_seed=None, log_path=logs / "d.log"
        )
    )
    yield from _started(servers)


@pytest.fixture(scope="session")
def vllm_pair(vllm_servers: list[VllmServer]) -> list[VllmServer]:
    return vllm_servers[:2]


@pytest.fixture(scope="session")
def vllm_default_hash(vllm_servers: list[VllmServer]) -> VllmServer:
    return vllm_servers[2]
