"""TTL sweeper cost with 10k and with 1M cache rows, 1k of them due.

The sweeper reads due caches through a partial index on ``expire_at`` of live caches,
so its time should follow the number of due caches (1k in both runs), not the table
size. Baseline in the same process: the same "find due caches" query with index scans
disabled (what a sweep without the index would cost at each size).

Usage: python bench/ttl_sweep.py [--large 1000000] [--small 10000] [--due 1000]
"""

from __future__ import annotations

import argparse
import time

from support import scratch_django


def _populate(total: int, due: int) -> None:
    from django.db import connection

    from tenants.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="bench-tenant", defaults={"display_name": "B"})
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM caches_cachetransition")
        cursor.execute("DELETE FROM caches_cacheobject")
        # One INSERT ... SELECT: rows differ by digest and name; the first `due` expired.
        cursor.execute(
            """
            INSERT INTO caches_cacheobject (
              id, tenant_id, name, provider, model, content, content_digest, token_count,
              ttl_policy, ttl_seconds, expire_at, state, state_changed_at, last_error,
              last_error_code, remote_name, vertex_project, vertex_location, placement,
              replication_factor, prewarm_cron, hit_count, hit_tokens, query_rate_ewma,
              created_at, updated_at, pool)
            SELECT gen_random_uuid(), %s, 'c' || g, 'vertex', 'gemini-2.5-flash', '{}'::jsonb,
                   md5(g::text), 2048, 'fixed', 3600,
                   CASE WHEN g <= %s THEN now() - interval '1 minute'
                        ELSE now() + (g %% 86400 + 60) * interval '1 second' END,
                   'active', now(), '', '', '', 'p1', 'us-central1', '{}', 1, '', 0, 0, 0,
                   now(), now(), ''
            FROM generate_series(1, %s) AS g
            """,
            [str(tenant.pk), due, total],
        )
        cursor.execute("ANALYZE caches_cacheobject")


def _baseline_scan_ms() -> float:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        start = time.perf_counter()
        cursor.execute(
            "SELECT id FROM caches_cacheobject WHERE state IN ('active','refreshing') "
            "AND expire_at <= now() ORDER BY expire_at LIMIT 500"
        )
        cursor.fetchall()
        return (time.perf_counter() - start) * 1000


def _plan_uses_partial_index() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT id FROM caches_cacheobject WHERE state IN ('active','refreshing') "
            "AND expire_at <= now() ORDER BY expire_at LIMIT 500"
        )
        return any("cache_due_expiry_idx" in row[0] for row in cursor.fetchall())


def _sweep_ms() -> tuple[float, int]:
    from caches.services.scheduling import cache_expire_due

    start = time.perf_counter()
    swept = 0
    while True:
        n = cache_expire_due()
        swept += n
        if n == 0:
            break
    return (time.perf_counter() - start) * 1000, swept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=1_000)
    args = parser.parse_args()
    with scratch_django("ttl_sweep"):
        results = {}
        for label, total in (("small", args.small), ("large", args.large)):
            t0 = time.perf_counter()
            _populate(total, args.due)
            fill_s = time.perf_counter() - t0
            baseline = _baseline_scan_ms()
            indexed = _plan_uses_partial_index()
            sweep_ms, swept = _sweep_ms()
            results[label] = (sweep_ms, baseline)
            print(
                f"{label:5} rows={total:>9,} due={args.due} fill={fill_s:5.1f}s "
                f"sweep={sweep_ms:8.1f} ms swept={swept} partial_index_used={indexed} "
                f"baseline_seq_scan_find={baseline:8.1f} ms"
            )
        ratio = results["large"][0] / results["small"][0]
        baseline_ratio = results["large"][1] / max(results["small"][1], 1e-6)
        size_ratio = args.large / args.small
        print(
            f"table grew {size_ratio:.0f}x; sweep time grew {ratio:.2f}x "
            f"(baseline scan grew {baseline_ratio:.1f}x)"
        )
        print(
            f"RESULT rows_small={args.small} rows_large={args.large} due={args.due} "
            f"sweep_small_ms={results['small'][0]:.1f} sweep_large_ms={results['large'][0]:.1f} "
            f"sweep_ratio={ratio:.2f} baseline_scan_ratio={baseline_ratio:.1f}"
        )


if __name__ == "__main__":
    main()
