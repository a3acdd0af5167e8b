"""Registering real vLLM through the CLI and through the console form (REST: the fleet tests).

- ``cacheplane worker --engine vllm --register``: the way an operator deploys it, the CLI
  records the worker and then starts real vLLM itself (the tiny model, every flag after
  ``--`` passed through, the API key in the environment only); ``--dry-run`` first prints
  the same registration and writes nothing, starts nothing. One short-lived server.
- The console's registration form, posted as a logged-in platform admin, for a running
  session server started with vLLM's defaults (``sha256``, no ``PYTHONHASHSEED``).

Each then checks what was recorded (engine, the version the server reports, KV-events and
replay endpoints, pool, a sealed key) and that the KV indexer, fed from the registry as
``kv_indexer --from-registry`` is, indexes that worker's real events with matching hashes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis as redis_lib
from django.conf import settings
from django.test import Client

from audit.models import AuditEvent
from tests.caches.processes import database_url
from tests.workers.real_vllm.runtime import env_python, free_port
from tests.workers.real_vllm.support import long_text
from workers import kv_index
from workers.kv_indexer import IndexerThread, registry_sources
from workers.models import Worker
from workers.secrets import unseal
from workers.services import worker_probe

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[3]


def _wait(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout:.0f}s"
        time.sleep(0.2)  # polling another process's state


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _indexes_events_of(name: str, base_url: str, headers: dict[str, str]) -> dict:
    """Run the indexer on ``registry_sources()`` (the ``--from-registry`` code path),
    prefill a long prompt on the worker, and return its event status once indexed."""
    sources = registry_sources()
    assert [(s.worker, s.spec is not None) for s in sources] == [(name, True)]
    client = redis_lib.Redis.from_url(settings.REDIS_URL)
    indexer = IndexerThread(redis=client, sources=registry_sources).start()
    try:
        status = lambda: kv_index.worker_event_status(client, workers=[name])[name]  # noqa: E731
        httpx.post(
            f"{base_url}/v1/completions",
            json={"model": "tiny", "prompt": long_text(9090, 300), "max_tokens": 1},
            headers=headers,
            timeout=120,
        ).raise_for_status()
        _wait(lambda: status()["resident_blocks"] > 0 and status()["live"], what="indexed")
        _wait(lambda: status()["hash_ok"] > 0, what="hash checked")
        return status()
    finally:
        indexer.stop()


def _reported_version(base_url: str) -> str:
    reply = httpx.get(f"{base_url}/version", timeout=10)
    reply.raise_for_status()
    return str(reply.json()["version"])


def _cli_worker(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "controlplane.cli", "worker", *args]


def test_cli_registers_and_starts_real_vllm_and_dry_run_writes_nothing(
    tiny_model, vllm_version, redis_flush
):
    port, pub, replay = free_port(), free_port(), free_port()
    base_url = f"http://127.0.0.1:{port}"
    args = [
        "--engine",
        "vllm",
        "--register",
        "cli-vllm",
        "--advertise-url",
        base_url,
        "--pool",
        "cpu-small",
        "--vllm-python",
        str(env_python()),
        "--kv-events-endpoint",
        f"tcp://*:{pub},tcp://*:{replay}",
        "--",  # passed through to vLLM verbatim
        "--model",
        str(tiny_model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--enforce-eager",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CACHEPLANE_VLLM_API_KEY": "sk-cli-worker-secret",
        "PYTHONHASHSEED": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "OMP_NUM_THREADS": "1",
    }
    dry = subprocess.run(
        _cli_worker(["--dry-run", *args]),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        f"would register worker cli-vllm (tiny, engine vllm {vllm_version}) at {base_url}, "
        f"pool cpu-small, KV events tcp://*:{pub},tcp://*:{replay}"
    ) in dry.stdout
    assert "-m vllm.entrypoints.openai.api_server" in dry.stdout and str(tiny_model) in dry.stdout
    # The key is passed in the environment and the dry run never prints it.
    assert "sk-cli-worker-secret" not in dry.stdout + dry.stderr
    assert "VLLM_API_KEY='[redacted]'" in dry.stdout
    assert not Worker.objects.exists() and not AuditEvent.objects.exists()
    assert not _listening(port)  # nothing was started

    log = open(Path(str(tiny_model)).parent / f"cli-vllm-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        _cli_worker(args),
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the CLI, vLLM and its engine core: one group to stop
    )
    try:
        _wait(lambda: Worker.objects.filter(name="cli-vllm").exists(), 120, "registration")
        worker = Worker.objects.get(name="cli-vllm")  # recorded before vLLM serves
        assert (worker.engine, worker.pool, worker.model) == ("vllm", "cpu-small", "tiny")
        assert worker.engine_version == vllm_version
        assert worker.kv_events_endpoint == f"tcp://*:{pub},tcp://*:{replay}"
        assert worker.tokenizer == str(Path(tiny_model).resolve()) and worker.hash_seed == "0"
        assert "sk-cli-worker-secret" not in worker.api_key_sealed
        assert unseal(worker.api_key_sealed) == "sk-cli-worker-secret"
        event = AuditEvent.objects.get(action="workers.worker.register")
        assert event.changes["api_key_sealed"]["after"] == "[redacted]"

        def ready() -> bool:
            assert proc.poll() is None, "cacheplane worker exited"
            try:
                return httpx.get(f"{base_url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _wait(ready, 600, "vLLM started by the CLI")
        # The key reached vLLM through the environment: it is demanded.
        denied = httpx.post(f"{base_url}/v1/completions", json={"model": "tiny", "prompt": "x"})
        assert denied.status_code == 401
        worker = worker_probe(worker=worker)
        assert worker.state == "healthy", worker.metrics
        assert worker.engine_version == _reported_version(base_url) == vllm_version
        # The CLI's defaults and the passthrough reached vLLM: sha256_cbor, 128-token blocks.
        assert (worker.block_size, worker.hash_algo) == (128, "sha256_cbor")
        status = _indexes_events_of(
            "cli-vllm", base_url, {"Authorization": "Bearer sk-cli-worker-secret"}
        )
        assert status["hash_bad"] == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def test_console_form_registers_a_running_real_vllm_completely(
    platform_admin, vllm_default_hash, tiny_model, redis_flush
):
    server = vllm_default_hash  # vLLM's defaults: sha256 and no PYTHONHASHSEED
    client = Client()
    client.force_login(platform_admin)
    form = {
        "name": "console-vllm",
        "base_url": server.base_url,
        "model": "tiny",
        "pool": "cpu-console",
        "engine": "vllm",
        "engine_version": "",  # left blank: the probe records what the server reports
        "kv_events_endpoint": server.events_endpoint,
        "hash_seed": "",  # PYTHONHASHSEED unset on that server
        "tokenizer": str(tiny_model),
        "api_key": "sk-console-worker-secret",
    }
    reply = client.post("/platform/workers/register", form)
    assert reply.status_code in (302, 303), reply.content.decode()[:500]
    worker = Worker.objects.get(name="console-vllm")
    assert (worker.engine, worker.pool) == ("vllm", "cpu-console")
    assert worker.kv_events_endpoint == f"tcp://*:{server.events_port},tcp://*:{server.replay_port}"
    assert "sk-console-worker-secret" not in worker.api_key_sealed
    assert unseal(worker.api_key_sealed) == "sk-console-worker-secret"
    event = AuditEvent.objects.get(action="workers.worker.register")
    assert event.changes["api_key_sealed"]["after"] == "[redacted]"
    worker = worker_probe(worker=worker)
    assert worker.state == "healthy", worker.metrics
    assert worker.engine_version == _reported_version(server.base_url)
    assert worker.engine_version.startswith("0.32")
    assert (worker.block_size, worker.hash_algo) == (128, "sha256")
    page = client.get("/platform/workers/").content.decode()
    assert "console-vllm" in page and "sk-console-worker-secret" not in page
    status = _indexes_events_of("console-vllm", server.base_url, {})
    assert status["hash_bad"] == 0  # vLLM's default seed and sha256, as the registry says
