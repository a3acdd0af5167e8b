"""Console responsiveness: event-to-DOM latency in a real browser under gateway load, and
the platform overview's server time and query count at 1,000 tenants / 100,000 caches.

1. A live server (Django + gateway + Channels) and a reference worker run in this
   process; Chromium (Playwright) shows a tenant page while ~50 requests/s flow through
   the gateway and cache lifecycle events are published. The page records, for every
   event it applies to the DOM, ``Date.now() − sent_at``: lifecycle events take the
   immediate path, usage ticks the coalesced (≤ 1/s) one.
2. The overview is rendered with 1,000 tenants and 100,000 caches against a baseline of
   10 tenants and 1,000 caches, in the same process: time and query count.

Usage: python bench/console_latency.py [--seconds 20] [--rps 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from support import scratch_django

CHROMIUM = "/usr/bin/chromium"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


def _live_server():
    import socket

    import uvicorn

    from controlplane.asgi import application

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(application, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def _setup_tenant(worker_url: str):
    from tenants.actor import Actor
    from tenants.models import PrincipalKind, Role, RoleBinding
    from tenants.services import keys
    from tenants.services.iam import service_account_create
    from tenants.services.tenants import human_principal_create, tenant_create
    from workers.services import worker_register

    worker_register(actor=Actor.cli(), name="bench-0", base_url=worker_url, model="bench/ref")
    admin = human_principal_create(
        actor=Actor.cli(), username="bench-admin", password="bench-password-123"
    )
    tenant = tenant_create(actor=Actor.cli(), slug="bench-co", display_name="Bench Co", admin=admin)
    sa = service_account_create(actor=Actor.cli(), tenant=tenant, name="load")
    RoleBinding.objects.create(
        tenant=tenant, principal=sa, role=Role.objects.get(name="tenant.developer")
    )
    actor = Actor(principal=admin, auth_method="cli")
    key = keys.api_key_create(actor=actor, tenant=tenant, name="load", principal=sa)
    assert admin.kind == PrincipalKind.HUMAN
    return tenant, key.plaintext


def _load(url: str, key: str, rps: int, seconds: float, stop: threading.Event) -> list[float]:
    import httpx

    latencies: list[float] = []
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    interval = 1.0 / rps
    deadline = time.monotonic() + seconds
    next_at = time.monotonic()
    n = 0
    while time.monotonic() < deadline and not stop.is_set():
        n += 1
        start = time.perf_counter()
        client.post(
            "/v1/chat/completions",
            json={
                "model": "bench/ref",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": f"Shared policy preamble. Q{n % 20}"}],
            },
        )
        latencies.append(time.perf_counter() - start)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))  # pacing the open loop, not work
    return latencies


def measure_latency(seconds: float, rps: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    from controlplane.assets import ensure_assets
    from controlplane.live import publish_now, tenant_group
    from workers.engine.config import CacheConfig, EngineConfig, ModelConfig
    from workers.engine.launcher import serve

    ensure_assets()
    config = EngineConfig(
        model="bench/ref",
        model_config=ModelConfig(
            num_layers=2,
            hidden_size=64,
            num_heads=4,
            num_kv_heads=2,
            head_dim=16,
            intermediate_size=128,
            max_position_embeddings=1024,
        ),
        cache_config=CacheConfig(kv_cache_memory_bytes=512 * 16 * 512),
        max_model_len=1024,
        enable_prompt_tokens_details=True,
    )
    with serve(config) as worker:
        server, thread, url = _live_server()
        tenant, key = _setup_tenant(worker.base_url)
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop on this thread
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--no-first-run",
                ],
            )
            page = browser.new_page()
            page.goto(f"{url}/login/")
            page.fill("input[name=username]", "bench-admin")
            page.fill("input[name=password]", "bench-password-123")
            page.click("button[type=submit]")
            page.wait_for_url("**/t/bench-co/")
            page.wait_for_selector("#live-status.on")
            stop = threading.Event()
            results: dict[str, list[float]] = {}
            loader = threading.Thread(
                target=lambda: results.setdefault("req", _load(url, key, rps, seconds, stop))
            )
            loader.start()

            def lifecycle_events() -> None:
                # From a thread of its own: this one runs Playwright's event loop.
                for n in range(int(seconds * 4)):
                    if stop.is_set():
                        break
                    publish_now(
                        tenant_group(tenant.pk, "caches"),
                        "caches.cache.state",
                        {"id": f"bench-{n}", "name": "bench", "state": "active"},
                    )
                    time.sleep(0.25)  # pacing the event stream, not work

            publisher = threading.Thread(target=lifecycle_events)
            publisher.start()
            page.wait_for_timeout(seconds * 1000)  # the page keeps running meanwhile
            loader.join()
            publisher.join()
            samples = page.evaluate("window.__cacheplaneLatencies || []")
            browser.close()
        server.should_exit = True
        thread.join(timeout=10)
    lifecycle = [s["ms"] for s in samples if s["event"] == "caches.cache.state"]
    ticks = [s["ms"] for s in samples if s["event"] == "usage.tick"]
    reqs = results.get("req", [])
    return {
        "lifecycle_events": len(lifecycle),
        "tick_events": len(ticks),
        "lifecycle_p50_ms": _percentile(lifecycle, 0.5),
        "lifecycle_p99_ms": _percentile(lifecycle, 0.99),
        "tick_p50_ms": _percentile(ticks, 0.5),
        "tick_p99_ms": _percentile(ticks, 0.99),
        "requests": len(reqs),
        "achieved_rps": len(reqs) / seconds,
        "request_p50_ms": statistics.median(reqs) * 1000 if reqs else 0.0,
    }


def _populate(tenants: int, caches: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM caches_cachetransition")
        cursor.execute("DELETE FROM caches_cacheobject")
        cursor.execute("DELETE FROM tenants_tenant WHERE slug LIKE 'ov-%%'")
        cursor.execute(
            "INSERT INTO tenants_tenant (id, slug, display_name, state, cache_salt_secret, "
            "cache_salt_version, policy_version, created_at, updated_at) "
            "SELECT gen_random_uuid(), 'ov-' || lpad(g::text, 5, '0'), 'Tenant ' || g, "
            "'active', md5(g::text), 1, 1, now(), now() FROM generate_series(1, %s) g",
            [tenants],
        )
        cursor.execute(
            """INSERT INTO caches_cacheobject (id, tenant_id, name, provider, model, content,
               content_digest, ttl_policy, ttl_seconds, expire_at, state, state_changed_at,
               last_error, last_error_code, remote_name, vertex_project, vertex_location,
               placement, replication_factor, prewarm_cron, hit_count, hit_tokens,
               query_rate_ewma, created_at, updated_at, pool)
               SELECT gen_random_uuid(), t.id, 'c' || g, 'vertex', 'gemini-2.5-flash', '{}',
                 md5(g::text), 'fixed', 3600, now() + interval '1 hour', 'active', now(), '',
                 '', '', 'p', 'l', '{}', 1, '', 0, 0, 0, now(), now(), ''
               FROM generate_series(1, %s) g
               JOIN LATERAL (SELECT id FROM tenants_tenant WHERE slug LIKE 'ov-%%'
                             ORDER BY slug OFFSET (g %% %s) LIMIT 1) t ON true""",
            [caches, tenants],
        )
        cursor.execute("ANALYZE")


def measure_overview(tenants: int, caches: int) -> tuple[float, int]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tenants.models import Principal

    _populate(tenants, caches)
    client = Client()
    client.force_login(Principal.objects.get(username="bench-admin"))
    from tenants.models import Role, RoleBinding

    RoleBinding.objects.get_or_create(
        principal=Principal.objects.get(username="bench-admin"),
        role=Role.objects.get(name="platform.admin"),
        tenant=None,
    )
    client.get("/platform/")
    timings = []
    for _ in range(5):
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            response = client.get("/platform/")
            timings.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
    return statistics.median(timings), len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rps", type=int, default=50)
    args = parser.parse_args()
    with scratch_django("console"):
        latency = measure_latency(args.seconds, args.rps)
        print(
            f"load: {latency['requests']} requests in {args.seconds:.0f}s "
            f"({latency['achieved_rps']:.1f}/s, request p50 {latency['request_p50_ms']:.1f} ms)"
        )
        print(
            f"lifecycle events: n={latency['lifecycle_events']} "
            f"p50={latency['lifecycle_p50_ms']:.1f} ms p99={latency['lifecycle_p99_ms']:.1f} ms"
        )
        print(
            f"usage ticks (coalesced 1/s): n={latency['tick_events']} "
            f"p50={latency['tick_p50_ms']:.1f} ms p99={latency['tick_p99_ms']:.1f} ms"
        )
        base_ms, base_q = measure_overview(10, 1_000)
        big_ms, big_q = measure_overview(1_000, 100_000)
        print(f"overview 10 tenants/1k caches: {base_ms:.1f} ms, {base_q} queries")
        print(
            f"overview 1,000 tenants/100k caches: {big_ms:.1f} ms, {big_q} queries "
            f"(time ratio {big_ms / base_ms:.2f}x, queries {big_q}/{base_q})"
        )
        worst_p99 = max(latency["lifecycle_p99_ms"], latency["tick_p99_ms"])
        print(
            f"RESULT rps={latency['achieved_rps']:.1f} "
            f"event_p50_ms={latency['lifecycle_p50_ms']:.1f} "
            f"event_p99_ms={latency['lifecycle_p99_ms']:.1f} "
            f"tick_p99_ms={latency['tick_p99_ms']:.1f} "
            f"worst_p99_ms={worst_p99:.1f} overview_ms={big_ms:.1f} overview_queries={big_q} "
            f"overview_ratio={big_ms / base_ms:.2f}"
        )


if __name__ == "__main__":
    main()
