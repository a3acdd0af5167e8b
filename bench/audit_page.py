"""The platform audit page over 10^6 events: p95 of filtered, keyset-paged pages.

    .venv/bin/python bench/audit_page.py [--events 1000000] [--queries 200]

Fills a scratch database (``bench/support.py``: embedded PostgreSQL when DATABASE_URL is
unset; its own database either way, dropped at the end) with ``--events`` audit events
in one ``INSERT ... SELECT generate_series`` (12 actions, 50 actors, 5,000 targets, 20
tenants, 3 % refusals, 23 days), then requests ``/platform/audit/`` through Django's
test client as a platform admin (the whole page: access check, query, template) with a
random filter each time: none, actor, action, action prefix, target, outcome, tenant, a
one-day range, combinations, and the 20th page of a filter followed by its cursors.

Peer in the same run: the same ordering paged by OFFSET (page 2,000, i.e. 100,000 rows
in), the approach keyset paging replaces. Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import scratch_django

ACTIONS = [
    "caches.cache.create",
    "caches.cache.extend_ttl",
    "caches.cache.evict",
    "billing.budget.create",
    "billing.budget.update",
    "billing.budget.exceeded",
    "tenants.api_key.create",
    "tenants.api_key.revoke",
    "tenants.policy.set",
    "gateway.rate_limit.update",
    "frontend.page.view",
    "workers.worker.drain",
]
TARGETS = ["cache", "budget", "api_key", "iam_policy", "rate_limit", "worker"]


def fill(events: int) -> list[str]:
    """Insert the events in one statement; returns the tenant slugs."""
    from django.db import connection

    from tenants.models import Tenant

    tenants = [
        Tenant.objects.create(slug=f"bench-{n}", display_name=f"Bench {n}") for n in range(20)
    ]
    ids = "ARRAY[" + ",".join(f"'{t.pk}'::uuid" for t in tenants) + "]"
    actions = "ARRAY[" + ",".join(f"'{a}'" for a in ACTIONS) + "]"
    targets = "ARRAY[" + ",".join(f"'{t}'" for t in TARGETS) + "]"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO audit_auditevent (chain, seq, prev_hash, hash, occurred_at, tenant_id,
                actor_id, actor_name, auth_method, key_id, action, target_type, target_id,
                outcome, source_ip, user_agent, request_id, changes, details)
            SELECT 'bench:' || (i %% 20), i, repeat('0', 64), md5(i::text) || md5(i::text),
                now() - ((%s - i) * interval '2 seconds'),
                ({ids})[1 + i %% 20],
                'actor-' || (i %% 50), 'user' || (i %% 50), 'session', NULL,
                ({actions})[1 + (i * 7) %% 12],
                ({targets})[1 + (i * 3) %% 6],
                md5((i %% 5000)::text),
                CASE WHEN i %% 100 < 2 THEN 'denied' WHEN i %% 100 = 2 THEN 'failed'
                     ELSE 'success' END,
                '10.0.0.1', 'bench', 'req-' || i,
                jsonb_build_object('limit_micros',
                    jsonb_build_object('before', i, 'after', i + 1)),
                '{{}}'::jsonb
            FROM generate_series(1, %s) AS i
            """,
            [events, events],
        )
        cursor.execute("ANALYZE audit_auditevent")
    return [t.slug for t in tenants]


def random_query(rng: random.Random, slugs: list[str], events: int) -> dict[str, str]:
    from datetime import UTC, datetime, timedelta

    day = datetime.now(tz=UTC) - timedelta(seconds=rng.randrange(0, events * 2))
    options = [
        {},
        {"actor": f"user{rng.randrange(50)}"},
        {"action": rng.choice(ACTIONS)},
        {"action": rng.choice(["billing.*", "caches.cache.*", "tenants.*"])},
        {"target": f"{rng.choice(TARGETS)}:{_md5(rng.randrange(5000))}"},
        {"outcome": rng.choice(["denied", "failed"])},
        {"tenant": rng.choice(slugs)},
        {
            "since": (day - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
            "until": day.strftime("%Y-%m-%dT%H:%M"),
        },
        {"actor": f"user{rng.randrange(50)}", "outcome": "denied"},
        {"tenant": rng.choice(slugs), "action": rng.choice(ACTIONS)},
    ]
    return rng.choice(options)


def _md5(n: int) -> str:
    import hashlib

    return hashlib.md5(str(n).encode()).hexdigest()  # noqa: S324 - the fixture's ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    with scratch_django("audit_page"):
        from django.test import Client

        from tests.factories import HumanFactory, bind

        started = time.perf_counter()
        slugs = fill(args.events)
        fill_s = time.perf_counter() - started
        admin = HumanFactory(username="bench-ops")
        bind(admin, "platform.admin", None)
        client = Client()
        client.force_login(admin)
        rng = random.Random(27)
        client.get("/platform/audit/")  # warm: templates, connection
        from audit.event_pages import AuditPageFilters, audit_event_page_all_tenants
        from frontend.views_history import _utc

        times, queries = [], []
        by_filter: dict[str, list[float]] = {}
        for _ in range(args.queries):
            params = random_query(rng, slugs, args.events)
            t0 = time.perf_counter()
            response = client.get("/platform/audit/", params)
            times.append((time.perf_counter() - t0) * 1000)
            by_filter.setdefault("+".join(sorted(params)) or "none", []).append(times[-1])
            assert response.status_code == 200, response.status_code
            filters = AuditPageFilters(
                **{k: v for k, v in params.items() if k not in ("since", "until")},
                since=_utc(params.get("since", "")),
                until=_utc(params.get("until", "")),
            )
            t0 = time.perf_counter()
            audit_event_page_all_tenants(filters=filters)
            queries.append((time.perf_counter() - t0) * 1000)
        # Deep pages: follow the cursor 20 pages in, timing the 20th.
        deep = []
        for _ in range(10):
            params = random_query(rng, slugs, args.events)
            html = client.get("/platform/audit/", params).content.decode()
            for _page in range(19):
                if 'id="audit-older"' not in html:
                    break
                link = html.split('" id="audit-older"')[0].rsplit('href="', 1)[1]
                t0 = time.perf_counter()
                html = client.get("/platform/audit/" + link.replace("&amp;", "&")).content.decode()
                elapsed = (time.perf_counter() - t0) * 1000
            else:
                deep.append(elapsed)
        from audit.models import AuditEvent

        offset = []
        for _ in range(10):
            t0 = time.perf_counter()
            list(AuditEvent.objects.order_by("-occurred_at", "-id")[100_000:100_050])
            offset.append((time.perf_counter() - t0) * 1000)

    def p95(values: list[float]) -> float:
        return statistics.quantiles(values, n=20)[18] if len(values) >= 2 else max(values)

    print(f"fill: {args.events} events in {fill_s:.1f} s")
    for name, values in sorted(by_filter.items()):
        print(f"  filter {name}: max {max(values):.1f} ms over {len(values)}")
    p50 = statistics.median(times)
    print(f"page: p50 {p50:.1f} ms, p95 {p95(times):.1f} ms, max {max(times):.1f} ms")
    if deep:
        print(f"20th page by cursor: p95 {p95(deep):.1f} ms over {len(deep)} walks")
    print(f"selector only (query + rows): p95 {p95(queries):.1f} ms")
    print(f"OFFSET peer (page 2000, query only): p95 {p95(offset):.1f} ms")
    print(
        f"RESULT audit_events={args.events} queries={len(times)} "
        f"page_p50_ms={statistics.median(times):.1f} page_p95_ms={p95(times):.1f} "
        f"page_max_ms={max(times):.1f} query_p95_ms={p95(queries):.1f} "
        f"deep_page_p95_ms={p95(deep) if deep else float('nan'):.1f} "
        f"offset_page2000_p95_ms={p95(offset):.1f} target_p95_ms=300"
    )


if __name__ == "__main__":
    main()
