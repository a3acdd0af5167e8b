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


def _launch(*argv: str):
    from workers.engine_launch import _parser, build_launch

    args, rest = _parser().parse_known_args(list(argv))
    return build_launch(args, rest)


def test_vllm_engine_command_passes_every_vllm_flag_through_and_starts_the_api_server() -> None:
    launch = _launch(
        "--engine",
        "vllm",
        "--kv-events-endpoint",
        "tcp://*:6001",
        "--kv-events-replay-endpoint",
        "tcp://*:6002",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--port",
        "8100",
        "--tensor-parallel-size",
        "2",
        "--max-num-seqs=7",
        "--enable-lora",
    )
    argv = launch.argv
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    # Everything Cacheplane does not own reaches vLLM verbatim and in order.
    tail = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8100"]
    tail += ["--tensor-parallel-size", "2", "--max-num-seqs=7", "--enable-lora"]
    assert argv[-len(tail) :] == tail
    assert "--enable-prompt-tokens-details" in argv and "--enable-prefix-caching" in argv
    assert argv[argv.index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"
    assert launch.events == "tcp://*:6001,tcp://*:6002"
    assert launch.env["PYTHONHASHSEED"] == "0"


def test_operator_flags_after_the_double_dash_win_over_cacheplanes_defaults() -> None:
    from workers.engine_launch import _parser, build_launch

    args, rest = _parser().parse_known_args(["--engine", "vllm"])
    launch = build_launch(
        args,
        [
            *rest,
            "--model",
            "m",
            "--prefix-caching-hash-algo",
            "sha256",
            "--kv-events-config",
            '{"enable_kv_cache_events": true, "endpoint": "tcp://*:7000"}',
        ],
    )
    assert launch.argv.count("--prefix-caching-hash-algo") == 1
    assert launch.argv[launch.argv.index("--prefix-caching-hash-algo") + 1] == "sha256"
    assert launch.argv.count("--kv-events-config") == 1
    assert launch.events == "tcp://*:7000"


def _cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    import os

    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    host = (db["HOST"] or "").replace("/", "%2F")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "worker", *argv],
        cwd=REPO,
        env={
            **os.environ,
            "DATABASE_URL": f"postgresql://{db['USER']}@{host}{port}/{db['NAME']}",
            "REDIS_URL": settings.REDIS_URL,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)  # the subprocess would commit to the same database
def test_cacheplane_worker_dry_run_prints_the_registration_and_writes_nothing() -> None:
    result = _cli(
        "--engine",
        "vllm",
        "--dry-run",
        "--register",
        "gpu-7",
        "--advertise-url",
        "http://10.1.2.3:8000",
        "--",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--port",
        "8000",
        CACHEPLANE_VLLM_API_KEY="sk-dry-run-secret",
    )
    assert result.returncode == 0, result.stderr
    assert "would register worker gpu-7" in result.stdout
    assert "sk-dry-run-secret" not in result.stdout + result.stderr  # shown as [redacted]
    assert "VLLM_API_KEY='[redacted]'" in result.stdout
    assert "KV events tcp://*:5557,tcp://*:5558" in result.stdout
    assert "-m vllm.entrypoints.openai.api_server" in result.stdout
    assert not Worker.objects.filter(name="gpu-7").exists()
    assert not AuditEvent.objects.filter(action="workers.worker.register").exists()


class _SwitchableWorker:
    """A real local HTTP server answering /health and /metrics; ``metrics`` is what
    /metrics returns (vLLM exposition text, or anything else)."""

    GOOD = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc 0.25\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="32",num_gpu_blocks="128"} 1.0\n'
    )

    def __init__(self) -> None:
        import http.server
        import threading

        self.metrics = self.GOOD
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (owner.metrics if self.path == "/metrics" else "ok").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def switchable_worker():
    worker = _SwitchableWorker()
    yield worker
    worker.close()


def test_a_worker_without_prometheus_metrics_is_unhealthy_and_the_others_are_still_probed(
    switchable_worker, redis_flush
) -> None:
    from workers.services import workers_probe_all

    switchable_worker.metrics = "<html><body>Welcome to nginx!</body></html>"
    with serve(tiny_config(num_blocks=64)) as running:
        # "a-" sorts first: a crash on it would leave "b-" unprobed.
        worker_register(
            actor=Actor.cli(), name="a-bad", base_url=switchable_worker.base_url, model="m"
        )
        worker_register(actor=Actor.cli(), name="b-ref", base_url=running.base_url, model="m")
        Worker.objects.update(state=WorkerState.UNHEALTHY)
        probed = {w.name: w for w in workers_probe_all()}
    assert probed["a-bad"].state == WorkerState.UNHEALTHY
    assert "not Prometheus text" in probed["a-bad"].metrics["probe_error"]
    assert probed["b-ref"].state == WorkerState.HEALTHY
    assert "vllm:kv_cache_usage_perc" in probed["b-ref"].metrics
    assert Worker.objects.get(name="a-bad").state == WorkerState.UNHEALTHY


def test_an_unhealthy_worker_recovers_when_it_answers_again(switchable_worker, redis_flush) -> None:
    from workers.tasks import workers_probe_task

    worker_register(
        actor=Actor.cli(), name="flappy", base_url=switchable_worker.base_url, model="m"
    )
    switchable_worker.metrics = "not metrics at all"
    workers_probe_task.apply()
    worker = Worker.objects.get(name="flappy")
    assert worker.state == WorkerState.UNHEALTHY and worker.metrics["probe_error"]
    seen_before = worker.last_seen_at

    switchable_worker.metrics = _SwitchableWorker.GOOD
    for _ in range(2):  # running the task twice changes nothing more
        workers_probe_task.apply()
        worker.refresh_from_db()
        assert worker.state == WorkerState.HEALTHY
        assert worker.metrics == {"vllm:kv_cache_usage_perc": 0.25}
        assert (worker.block_size, worker.num_blocks) == (32, 128)
    assert worker.last_seen_at > seen_before


def test_probing_leaves_a_draining_worker_draining(switchable_worker) -> None:
    worker = worker_register(
        actor=Actor.cli(), name="drain", base_url=switchable_worker.base_url, model="m"
    )
    Worker.objects.filter(pk=worker.pk).update(state=WorkerState.DRAINING)
    worker.refresh_from_db()
    assert worker_probe(worker=worker).state == WorkerState.DRAINING
    switchable_worker.metrics = "garbage here"
    assert worker_probe(worker=worker).state == WorkerState.DRAINING


def test_a_worker_that_stays_down_is_reported_once_not_every_probe(
    switchable_worker, caplog
) -> None:
    worker = worker_register(
        actor=Actor.cli(), name="down", base_url=switchable_worker.base_url, model="m"
    )
    switchable_worker.metrics = "garbage here"
    with caplog.at_level("INFO", logger="workers.services"):
        for _ in range(3):
            worker = worker_probe(worker=worker)
        switchable_worker.metrics = _SwitchableWorker.GOOD
        worker_probe(worker=worker)
    messages = [r.getMessage() for r in caplog.records if r.name == "workers.services"]
    assert messages == ["worker probe failed", "worker recovered"]
