"""KV memory pressure history: the probe stores it per worker per minute, the console's
series endpoint reads it back by range (so 1 h / 24 h / 7 d survive a reload)."""

from __future__ import annotations

import http.server
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.actor import Actor
from workers.kv_pressure import RETENTION, worker_kv_sample_record, worker_kv_series
from workers.models import WorkerKvSample
from workers.services import worker_register, workers_probe_all

pytestmark = pytest.mark.django_db


class _MetricsServer:
    """A vLLM-shaped /health and /metrics whose KV usage the test sets."""

    def __init__(self) -> None:
        self.usage = 0.0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                text = (
                    "# TYPE vllm:kv_cache_usage_perc gauge\n"
                    f'vllm:kv_cache_usage_perc{{model_name="m"}} {owner.usage}\n'
                )
                body = (text if self.path == "/metrics" else "ok").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metrics_server():
    server = _MetricsServer()
    yield server
    server.close()


def test_each_probe_folds_kv_usage_into_the_workers_row_for_the_minute(
    metrics_server, redis_flush
) -> None:
    worker_register(actor=Actor.cli(), name="gpu-1", base_url=metrics_server.base_url, model="m")
    for usage in (0.5, 0.9, 0.7):
        metrics_server.usage = usage
        workers_probe_all()
    rows = list(WorkerKvSample.objects.filter(worker_name="gpu-1"))
    # Three probes within one test run fall in one or two minutes; totals are exact.
    assert sum(r.samples for r in rows) == 3
    assert max(r.usage_max for r in rows) == pytest.approx(0.9)
    assert sum(r.usage_sum for r in rows) == pytest.approx(2.1)


def test_one_minute_keeps_the_peak_and_the_mean_and_old_rows_are_pruned() -> None:
    now = timezone.now().replace(second=30)
    worker_kv_sample_record(usage={"a": 0.2, "b": 1.4}, at=now)  # 1.4: clamped to 1
    worker_kv_sample_record(usage={"a": 0.8}, at=now + timedelta(seconds=5))
    a = WorkerKvSample.objects.get(worker_name="a")
    assert (a.usage_max, a.samples) == (pytest.approx(0.8), 2)
    assert a.usage_sum / a.samples == pytest.approx(0.5)
    assert WorkerKvSample.objects.get(worker_name="b").usage_max == 1.0
    WorkerKvSample.objects.create(
        worker_name="a",
        bucket=now - RETENTION - timedelta(hours=1),
        usage_max=1,
        usage_sum=1,
        samples=1,
    )
    worker_kv_sample_record(usage={}, at=now)
    assert not WorkerKvSample.objects.filter(bucket__lt=now - RETENTION).exists()


def test_the_series_has_every_bucket_of_the_range_with_gaps_as_null() -> None:
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    for minutes_ago, usage in ((5, 0.91), (4, 0.4), (90, 0.6)):
        worker_kv_sample_record(usage={"gpu-1": usage}, at=now - timedelta(minutes=minutes_ago))
    hour = worker_kv_series(range_key="1h", now=now)
    points = hour["workers"]["gpu-1"]
    assert hour["step_seconds"] == 60 and hour["threshold"] == 0.85
    assert len(points) == 61  # every minute of the hour, ends included
    values = [p["max"] for p in points]
    assert sorted(v for v in values if v is not None) == [0.4, 0.91]  # 90 min ago: outside
    assert values.count(None) == 59
    day = worker_kv_series(range_key="24h", now=now)
    assert day["step_seconds"] == 900
    assert max(p["max"] or 0 for p in day["workers"]["gpu-1"]) == 0.91  # peak of its bucket
    assert worker_kv_series(range_key="bogus", now=now)["range"] == "1h"


def test_the_kv_series_endpoint_is_for_platform_principals_only(
    api, platform_admin, admin_a
) -> None:
    worker_kv_sample_record(usage={"gpu-1": 0.5})
    api.force_authenticate(platform_admin)
    response = api.get("/api/v1/platform/console/kv-series?range=24h")
    assert response.status_code == 200
    assert response.json()["range"] == "24h" and "gpu-1" in response.json()["workers"]
    api.force_authenticate(admin_a)
    assert api.get("/api/v1/platform/console/kv-series").status_code == 403
