"""Helpers for gateway tests: more gateway processes on the test database, prices."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    """The server's URL (as the test run was given it) naming the test database."""
    from urllib.parse import urlsplit, urlunsplit

    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


@contextlib.contextmanager
def gateway_processes(count: int, **env: str) -> Iterator[list[str]]:
    """``count`` separate uvicorn processes of the whole app, on the test database and
    Redis (their URLs), with ``env`` added; yields their base URLs."""
    from django.conf import settings

    from controlplane.embedded import free_port

    base_env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "PYTHONWARNINGS": "ignore",
        **env,
    }
    processes: list[subprocess.Popen] = []
    urls: list[str] = []
    try:
        for _ in range(count):
            port = free_port()
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "controlplane.asgi:application",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--lifespan",
                        "off",
                        "--no-access-log",
                        "--log-level",
                        "warning",
                    ],
                    cwd=REPO,
                    env=base_env,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            deadline = time.monotonic() + 90
            while True:
                assert process.poll() is None, f"gateway at {url} exited at start"
                try:
                    httpx.get(f"{url}/v1/models", timeout=2)
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, f"gateway at {url} did not start"
                    time.sleep(0.2)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def vertex_env(emulator) -> dict[str, str]:
    """What a gateway process needs to reach the running Vertex emulator."""
    return {
        "CACHEPLANE_VERTEX_BASE_URL": emulator.base_url,
        "CACHEPLANE_VERTEX_STATIC_TOKEN": "test-token",
        "CACHEPLANE_VERTEX_PROJECT": "p1",
        "CACHEPLANE_VERTEX_LOCATION": "us-central1",
    }


def price_vertex_output_only(*, model: str, output_per_mtok: str) -> None:
    """A price where only output costs (so a request's hold equals its cost exactly)."""
    from billing.models import ModelPrice
    from billing.services.prices import model_price_create
    from tests.factories import actor_for

    # Corrected versions point at their successors (PROTECT): unlink, then delete.
    ModelPrice.objects.filter(provider="vertex", model=model).update(superseded_by=None)
    ModelPrice.objects.filter(provider="vertex", model=model).delete()
    model_price_create(
        actor=actor_for(None),
        provider="vertex",
        model=model,
        source="test",
        rates={
            "input_per_mtok": "0",
            "cached_input_per_mtok": "0",
            "output_per_mtok": output_per_mtok,
        },
    )


def price_vertex_storage(*, model: str, storage_per_mtok_hour: str = "4.5") -> None:
    """A price with a storage rate (so a cache holds and settles storage on its budgets),
    whatever a transactional test's flush left of the seeded price book."""
    from datetime import timedelta

    from django.utils import timezone

    from billing.models import ModelPrice
    from billing.services.prices import model_price_create
    from tests.factories import actor_for

    # Corrected versions point at their successors (PROTECT): unlink, then delete.
    ModelPrice.objects.filter(provider="vertex", model=model).update(superseded_by=None)
    ModelPrice.objects.filter(provider="vertex", model=model).delete()
    model_price_create(
        actor=actor_for(None),
        provider="vertex",
        model=model,
        source="test",
        rates={
            "input_per_mtok": "1",
            "cached_input_per_mtok": "0.25",
            "output_per_mtok": "1",
            "storage_per_mtok_hour": storage_per_mtok_hour,
        },
        # Effective a day back: tests accrue storage of caches "live for the last hour".
        effective_from=timezone.now() - timedelta(days=1),
    )


def price_pool_decode_only(*, pool: str = "default", decode_tokens_per_second: str = "1") -> None:
    """A GPU price where prefill rounds to 0 µ$ (prompts under 500 tokens) and each
    decoded token costs 1,000 µ$ (3.60 $/GPU-hour at one token per GPU-second)."""
    from billing.models import PoolPrice
    from billing.services.prices import pool_price_create
    from tests.factories import actor_for

    PoolPrice.objects.filter(pool=pool).delete()
    pool_price_create(
        actor=actor_for(None),
        pool=pool,
        source="test",
        rates={
            "gpu_hour_usd": "3.60",
            "prefill_tokens_per_gpu_second": "1000000",
            "decode_tokens_per_gpu_second": decode_tokens_per_second,
            "kv_blocks_per_gpu": 1000,
        },
    )


def hard_budget(tenant_key: dict, *, limit_micros: int, hard: bool = True):
    from billing.services.budgets import budget_create
    from tests.factories import actor_for

    return budget_create(
        actor=actor_for(tenant_key["admin"]),
        tenant=tenant_key["tenant"],
        name="hard",
        period="month",
        limit_micros=limit_micros,
        hard_limit=hard,
    )


def walk_away_mid_stream(url: str, key: str, body: dict, *, request_id: str) -> None:
    """Stream ``body`` through the gateway at ``url`` and close the connection after the
    third data event, as a client that goes away mid-stream."""
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}", "x-request-id": request_id},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: {")
            if seen == 3:
                return


def usage_row_once_booked(request_id: str, timeout: float = 10.0):
    """The ledger row of the request sent with ``X-Request-Id: request_id`` (kept as
    ``client_request_id``; the ledger key is the gateway's own), flushing the usage queue
    until the gateway has booked it (it notices a client that left on its next write)."""
    from billing.models import UsageRecord
    from billing.services.usage import usage_flush
    from tests.caches.processes import wait_for

    def booked() -> bool:
        usage_flush()
        return UsageRecord.objects.all_tenants().filter(client_request_id=request_id).exists()

    wait_for(booked, timeout, f"the usage row of {request_id}")
    return UsageRecord.objects.all_tenants().get(client_request_id=request_id)


def price_vertex_flash_with_audio(model: str = "gemini-2.5-flash") -> None:
    """The seeded Gemini 2.5 Flash price (spec §4), audio rates included, for tests whose
    database was flushed (transactional tests lose the migrations' price book)."""
    from datetime import UTC, datetime

    from billing.models import ModelPrice
    from billing.services.prices import model_price_create
    from tests.factories import actor_for

    if ModelPrice.objects.filter(provider="vertex", model=model).exists():
        return
    model_price_create(
        actor=actor_for(None),
        provider="vertex",
        model=model,
        source="test: spec §4",
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        rates={
            "input_per_mtok": "0.30",
            "cached_input_per_mtok": "0.03",
            "storage_per_mtok_hour": "1.00",
            "output_per_mtok": "2.50",
            "audio_input_per_mtok": "1.00",
            "audio_cached_input_per_mtok": "0.10",
        },
    )
