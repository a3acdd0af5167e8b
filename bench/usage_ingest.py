"""Benchmark: usage rows per second into PostgreSQL through the batch path.

    .venv/bin/python bench/usage_ingest.py [--rows 200000] [--baseline-rows 5000]

The batch path is what production runs: ``usage_record`` appends one message per request
to a Redis list, and ``usage_flush`` drains it in batches of 5,000 with one
``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`` feeding the minute and day
rollup upserts. The baseline, in the same run and database, is one INSERT (and commit)
per row: what a request path that writes its own ledger row would pay (ledger row only,
no rollups, so the baseline is flattered).

Runs with DATABASE_URL / REDIS_URL unset (starts an embedded PostgreSQL and Redis in a
temporary folder, as the test plugin does) or set (uses those servers). Either way it
migrates a scratch database ``bench_usage_<random>`` and drops it afterwards; with an
external Redis it uses a private queue key and deletes it. Ends with one RESULT line.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = [
    ("vertex", "gemini-2.5-pro"),
    ("vertex", "gemini-2.5-flash"),
    ("anthropic", "claude-sonnet-4-5"),
    ("openai", "gpt-5"),
    ("openai", "gpt-4o"),
]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _admin_connect(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _messages(tenants: list, rows: int, seed: int) -> list[bytes]:
    from billing.services.usage import usage_message

    rng = random.Random(seed)
    start = datetime.now(tz=UTC) - timedelta(minutes=10)
    out = []
    for n in range(rows):
        provider, model = rng.choice(MODELS)
        prompt = rng.randint(200, 150_000)
        cached = rng.randint(0, prompt) if rng.random() < 0.7 else 0
        write = rng.randint(0, prompt - cached) if provider == "anthropic" else 0
        out.append(
            usage_message(
                tenant=rng.choice(tenants),
                request_id=f"bench-{seed}-{n}",
                provider=provider,
                model=model,
                occurred_at=start + timedelta(milliseconds=3 * n),
                prompt_tokens=prompt,
                cached_read_tokens=cached,
                cache_write_5m_tokens=write,
                output_tokens=rng.randint(1, 2_000),
                ttft_ms=rng.randint(50, 2_000),
                latency_ms=rng.randint(200, 20_000),
                api_key_id=None,
                principal_id=None,
                cache_id=f"cache-{rng.randint(1, 200)}" if cached else None,
                worker="bench",
                stream=rng.random() < 0.5,
            )
        )
    return out


def _baseline(tenant, rows: int) -> float:
    """One INSERT + commit per row (autocommit), same pricing work per row."""
    from django.db import connection

    from billing.pricing import UsageCounts, token_cost
    from billing.selectors.prices import PriceIndex

    index = PriceIndex(models=MODELS)
    rng = random.Random(99)
    now = datetime.now(tz=UTC)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for n in range(rows):
            provider, model = rng.choice(MODELS)
            prompt = rng.randint(200, 150_000)
            cached = rng.randint(0, prompt)
            counts = UsageCounts(
                prompt_tokens=prompt, cached_read_tokens=cached, output_tokens=rng.randint(1, 2_000)
            )
            price = index.model_price(provider, model, now)
            cost = token_cost(counts, index.rates(price))
            cursor.execute(
                "INSERT INTO billing_usagerecord (tenant_id, request_id, occurred_at, provider, "
                "model, worker, pool, prompt_tokens, cached_read_tokens, cache_write_5m_tokens, "
                "cache_write_1h_tokens, output_tokens, status, stream, price_version_id, "
                "cost_micros, cost_without_cache_micros, recorded_at) VALUES (%s, %s, %s, %s, "
                "%s, 'bench', '', %s, %s, 0, 0, %s, 'ok', false, %s, %s, %s, now()) "
                "ON CONFLICT (tenant_id, request_id) DO NOTHING",
                [
                    tenant.pk,
                    f"single-{n}",
                    now,
                    provider,
                    model,
                    prompt,
                    cached,
                    counts.output_tokens,
                    price.pk,
                    cost.micros,
                    cost.without_cache_micros,
                ],
            )
    return rows / (time.perf_counter() - started)


def run(args: argparse.Namespace) -> None:
    import django
    from django.conf import settings

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    settings.CACHEPLANE_BILLING_USAGE_QUEUE_KEY = f"bench:usage:{secrets.token_hex(4)}"

    from billing.models import UsageRecord, UsageRollup
    from billing.services.usage import usage_flush, usage_record, usage_record_many
    from controlplane import ops
    from tenants.models import Tenant

    tenants = [
        Tenant.objects.create(slug=f"bench-{i:02d}", display_name=f"Bench {i}") for i in range(10)
    ]
    client = ops.redis_client()
    try:
        # The request path: one RPUSH per request (a sample, then the bulk load).
        sample = 5_000
        started = time.perf_counter()
        for n in range(sample):
            usage_record(
                tenant=tenants[n % 10],
                request_id=f"req-{n}",
                provider="vertex",
                model="gemini-2.5-pro",
                occurred_at=datetime.now(tz=UTC),
                prompt_tokens=1_000,
                cached_read_tokens=900,
                output_tokens=50,
            )
        record_us = (time.perf_counter() - started) / sample * 1e6
        messages = _messages(tenants, args.rows, seed=7)
        for i in range(0, len(messages), 10_000):
            usage_record_many(messages[i : i + 10_000])
        total = sample + len(messages)

        started = time.perf_counter()
        result = usage_flush(batch_size=args.batch, max_batches=10**6)
        batch_elapsed = time.perf_counter() - started
        assert result.inserted == total, (result, total)
        batch_rate = result.inserted / batch_elapsed

        # Replaying everything must insert nothing (idempotency under load).
        usage_record_many(messages[: args.batch])
        replay = usage_flush(batch_size=args.batch)
        baseline_rate = _baseline(tenants[0], args.baseline_rows)
        # all_tenants: the benchmark counts every tenant's rows
        rollups = UsageRollup.objects.all_tenants().count()
        # all_tenants: the benchmark counts every tenant's rows
        ledger = UsageRecord.objects.all_tenants().count()
    finally:
        for key in client.scan_iter(match=f"{settings.CACHEPLANE_BILLING_USAGE_QUEUE_KEY}*"):
            client.delete(key)

    ratio = batch_rate / baseline_rate
    print(f"request path (usage_record, one RPUSH): {record_us:.1f} µs per request")
    print(
        f"batch path:   {result.inserted} rows in {batch_elapsed:.2f} s "
        f"({result.batches} batches of {args.batch}) = {batch_rate:,.0f} rows/s"
    )
    print(
        f"baseline:     one INSERT per row, {args.baseline_rows} rows = {baseline_rate:,.0f} rows/s"
    )
    print(f"replayed {replay.claimed} messages: {replay.inserted} inserted (idempotent)")
    print(f"ledger rows {ledger}, rollup rows {rollups}")
    print(f"batch / per-row insert: {ratio:.1f}x")
    print(
        f"RESULT batch_rows_per_s={batch_rate:.0f} single_insert_rows_per_s={baseline_rate:.0f} "
        f"ratio={ratio:.1f} rows={result.inserted} record_us={record_us:.1f} "
        f"target_20000_met={str(batch_rate >= 20_000).lower()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--baseline-rows", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=5_000)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    services, scratch_dir = None, None
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        from controlplane.embedded import EmbeddedServices

        scratch_dir = Path(tempfile.mkdtemp(prefix="bench-usage-"))
        services = EmbeddedServices(scratch_dir, persist_redis=False)
        os.environ.update(services.start())
    server_url = os.environ["DATABASE_URL"]
    database = f"bench_usage_{secrets.token_hex(4)}"
    with _admin_connect(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    os.environ["DATABASE_URL"] = _with_database(server_url, database)
    try:
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        with _admin_connect(server_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        if services is not None:
            services.stop()
            shutil.rmtree(scratch_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
