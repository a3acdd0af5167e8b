"""Worker registration, probing, and the `cacheplane worker` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from audit.models import AuditEvent
from tenants.actor import Actor
from tests.workers.engine.support import tiny_config
from workers.engine.launcher import serve
from workers.engine_launch import build_command
from workers.models import Worker, WorkerState
from workers.routing import placement_for, rendezvous_order
from workers.services import worker_probe, worker_register

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def test_register_is_an_audited_upsert_by_name() -> None:
    first = worker_register(
        actor=Actor.cli(), name="w1", base_url="http://10.0.0.1:8000", model="m"
    )
    again = worker_register(
        actor=Actor.cli(), name="w1", base_url="http://10.0.0.2:8000", model="m"
    )
    assert first.pk == again.pk and again.base_url == "http://10.0.0.2:8000"
    events = AuditEvent.objects.filter(action="workers.worker.register").order_by("seq")
    assert events.count() == 2
    assert events.last().changes["base_url"] == {
        "before": "http://10.0.0.1:8000",
        "after": "http://10.0.0.2:8000",
    }


def test_probe_reads_capacity_and_metrics_from_a_real_worker() -> None:
    with serve(tiny_config(num_blocks=64)) as running:
        worker = worker_register(
            actor=Actor.cli(), name="ref", base_url=running.base_url, model="test/ref-tiny"
        )
        worker = worker_probe(worker=worker)
    assert worker.state == WorkerState.HEALTHY
    assert worker.block_size == 16 and worker.num_blocks == running.engine.config.num_gpu_blocks
    assert "vllm:kv_cache_usage_perc" in worker.metrics
    Worker.objects.filter(pk=worker.pk).update(base_url="http://127.0.0.1:9")
    worker.refresh_from_db()
    assert worker_probe(worker=worker).state == WorkerState.UNHEALTHY


def test_rendezvous_placement_is_stable_and_moves_little_when_a_worker_leaves() -> None:
    class W:
        def __init__(self, name: str) -> None:
            self.name = name

    pool = [W(f"w{n}") for n in range(5)]
    keys = [f"tenant:{n}" for n in range(500)]
    before = {k: placement_for(k, pool, 1)[0].name for k in keys}
    assert before == {k: placement_for(k, list(reversed(pool)), 1)[0].name for k in keys}
    after = {k: placement_for(k, pool[:-1], 1)[0].name for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == "w4" for k in moved)  # only the departed worker's keys move
    assert len(rendezvous_order("x", pool)) == 5


def test_vllm_engine_command_carries_the_flags_cacheplane_relies_on() -> None:
    argv, env = build_command(
        "vllm",
        ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8100", "--block-size", "32"],
    )
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert "--enable-prompt-tokens-details" in argv
    assert argv[argv.index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"
    assert argv[argv.index("--block-size") + 1] == "32"
    assert "--kv-events-config" in argv
    assert "PYTHONHASHSEED" in env


@pytest.mark.django_db(transaction=True)  # the subprocess commits; the flush removes it
def test_cacheplane_worker_dry_run_registers_and_prints_the_vllm_command() -> None:
    from django.db import connection

    db = connection.settings_dict
    host = (db["HOST"] or "").replace("/", "%2F")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    import os

    from django.conf import settings

    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}@{host}{port}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "worker",
            "--engine",
            "vllm",
            "--dry-run",
            "--register",
            "gpu-7",
            "--advertise-url",
            "http://10.1.2.3:8000",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--port",
            "8000",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "registered worker gpu-7" in result.stdout
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in result.stdout
    # The subprocess committed to the same (test) database.
    assert Worker.objects.filter(name="gpu-7", engine="vllm").exists()
