"""Audit export throughput and memory at 100k and 1M events (streamed, signed, zipped).

    .venv/bin/python bench/audit_export.py [--small 100000] [--large 1000000] [--chains 4]

Fills a scratch database (``bench/support.py``: embedded PostgreSQL when DATABASE_URL is
unset, dropped at the end) with valid hash chains through COPY, one signed digest per
chain, then runs the real export service (``audit_export_run``: a platform export of
every chain, JSONL + manifest + digests, zipped) at both sizes, and the offline
verifier on the large bundle. Peak memory is the largest resident-set growth during a
phase, sampled every 10 ms from /proc.

Baselines in the same process: (1) memory at 1M against 100k (a streamed export should
stay flat); (2) the naive export, ``list(queryset)`` then write, at the small size.
Each measured phase runs in a fresh child process, so no phase inherits another's heap.
Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import scratch_django

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def measured(phase: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run ``phase``; return (its result, seconds, peak RSS growth in bytes)."""
    gc.collect()
    start_rss = _rss()
    peak = [start_rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        result = phase()
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
    peak[0] = max(peak[0], _rss())
    return result, elapsed, peak[0] - start_rss


def _fill(chains: list[str], tenants: list[Any], per_chain: int, state: dict) -> float:
    """Append ``per_chain`` valid events to each chain with COPY; return seconds."""
    from django.db import connection

    from audit.chain import GENESIS_HASH, canonical_json, event_hash
    from audit.models import AuditChainHead

    started = time.perf_counter()
    columns = (
        "chain, seq, prev_hash, hash, occurred_at, tenant_id, actor_id, actor_name, "
        "auth_method, key_id, action, target_type, target_id, outcome, source_ip, user_agent, "
        "request_id, changes, details"
    )
    actions = ["caches.cache.create", "caches.cache.get", "tenants.api_key.revoke"]
    outcomes = ["success", "success", "success", "denied", "failed"]
    connection.ensure_connection()
    with connection.connection.cursor() as cursor:
        with cursor.copy(f"COPY audit_auditevent ({columns}) FROM STDIN") as copy:
            for chain, tenant in zip(chains, tenants, strict=True):
                seq, prev_hash, moment = state.get(chain, (0, GENESIS_HASH, state["t0"]))
                for _ in range(per_chain):
                    seq += 1
                    moment += timedelta(microseconds=997)
                    record = {
                        "chain": chain,
                        "seq": seq,
                        "prev_hash": prev_hash,
                        "occurred_at": moment.isoformat(timespec="microseconds"),
                        "tenant_id": str(tenant.pk),
                        "actor_id": None,
                        "actor_name": f"user{seq % 50}",
                        "auth_method": "api_key" if seq % 3 else "session",
                        "key_id": f"key-{seq % 7}" if seq % 3 else None,
                        "action": actions[seq % len(actions)],
                        "target_type": "cache",
                        "target_id": f"cache-{seq % 1000}",
                        "outcome": outcomes[seq % len(outcomes)],
                        "source_ip": f"10.0.{seq % 250}.{seq % 200}",
                        "user_agent": "bench/1.0",
                        "request_id": f"req-{seq:012d}",
                        "changes": {"ttl_seconds": {"before": 3600, "after": 7200}},
                        "details": {"model": "gemini-2.5-flash", "tokens": seq % 9000},
                    }
                    record["hash"] = prev_hash = event_hash(record)
                    copy.write_row(
                        (
                            chain,
                            seq,
                            record["prev_hash"],
                            record["hash"],
                            moment,
                            str(tenant.pk),
                            None,
                            record["actor_name"],
                            record["auth_method"],
                            record["key_id"],
                            record["action"],
                            "cache",
                            record["target_id"],
                            record["outcome"],
                            record["source_ip"],
                            "bench/1.0",
                            record["request_id"],
                            canonical_json(record["changes"]),
                            canonical_json(record["details"]),
                        )
                    )
                state[chain] = (seq, prev_hash, moment)
    # After the COPY: the connection is busy until it ends.
    for chain in chains:
        seq, prev_hash, _ = state[chain]
        AuditChainHead.objects.update_or_create(
            chain=chain, defaults={"seq": seq, "hash": prev_hash}
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
    return time.perf_counter() - started


def _digest_all(chains: list[str], hour: datetime) -> None:
    from audit.services.digests import audit_digest_create

    for chain in chains:
        audit_digest_create(chain=chain, hour=hour)


def _export() -> Any:
    from audit.services.exports import ExportRequest, audit_export_create, audit_export_run
    from tenants.actor import Actor

    export = audit_export_create(
        tenant=None, actor=Actor.cli(), request=ExportRequest(format="jsonl"), enqueue=False
    )
    export = audit_export_run(export=export)
    if export.status != "succeeded":
        raise SystemExit(f"export failed: {export.error_code} {export.error_message}")
    return export


def _naive_export(target: Path, limit: int) -> int:
    """The baseline: materialise the events (``list(queryset)``), then write them out."""
    from audit.chain import canonical_json
    from audit.models import AuditEvent
    from audit.selectors import audit_event_record

    events = list(AuditEvent.objects.order_by("chain", "seq")[:limit])
    records = [audit_event_record(event) for event in events]
    with target.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(canonical_json(record) + "\n")
    return len(records)


def _verify(path: Path, keys: Any) -> Any:
    from audit.verify import verify_bundle

    report = verify_bundle(path, keys)
    if not report.intact:
        raise SystemExit(f"verification failed: {[str(f) for f in report.findings[:5]]}")
    return report


def _child(args: argparse.Namespace) -> None:
    """One measured phase in a fresh process: no memory left over from earlier phases."""
    if args.phase == "verify":  # the offline verifier: no Django at all
        from audit.verify import load_keys

        keys = load_keys(args.keys)
        report, seconds, peak = measured(lambda: _verify(Path(args.bundle), keys))
        events = report.records + report.withheld
        print(f"PHASE {json.dumps({'events': events, 'seconds': seconds, 'peak': peak})}")
        return
    import django

    django.setup()
    if args.phase == "export":
        export, seconds, peak = measured(_export)
        outcome = {
            "events": export.total,
            "seconds": seconds,
            "peak": peak,
            "bytes": export.file_size,
            "file": export.file_name,
        }
    else:
        count, seconds, peak = measured(lambda: _naive_export(Path(args.bundle), args.limit))
        outcome = {"events": count, "seconds": seconds, "peak": peak}
    print(f"PHASE {json.dumps(outcome)}")


def _phase(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("PHASE "):
            return json.loads(line[len("PHASE ") :])
    raise SystemExit(f"phase {argv} failed:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--phase", choices=("export", "naive", "verify"), help=argparse.SUPPRESS)
    parser.add_argument("--bundle", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        _child(args)
        return
    if args.large <= args.small or args.small % args.chains or args.large % args.chains:
        raise SystemExit("--large must exceed --small, both divisible by --chains")
    workdir = Path(tempfile.mkdtemp(prefix="cacheplane-bench-export-"))
    os.environ["CACHEPLANE_EXPORT_DIR"] = str(workdir / "exports")
    os.environ["CACHEPLANE_AUDIT_SIGNING_KEY"] = base64.b64encode(os.urandom(32)).decode()
    os.environ["CACHEPLANE_AUDIT_SIGNING_KEY_ID"] = "bench"
    try:
        with scratch_django("audit_export"):
            _run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, workdir: Path) -> None:
    from audit.selectors import audit_signing_key_list
    from tenants.models import Tenant

    tenants = [
        Tenant.objects.create(slug=f"bench-{n}", display_name=f"Bench {n}")
        for n in range(args.chains)
    ]
    chains = [f"tenant:{t.pk}" for t in tenants]
    state: dict = {"t0": datetime(2026, 1, 1, tzinfo=UTC)}
    results: dict[str, dict[str, Any]] = {}
    filled = 0
    for label, size in (("small", args.small), ("large", args.large)):
        fill_s = _fill(chains, tenants, (size - filled) // args.chains, state)
        filled = size
        _digest_all(chains, state["t0"] + timedelta(hours=len(results) + 1))
        result = results[label] = _phase("--phase", "export")
        print(
            f"{label:5} events={result['events']:>9,} fill={fill_s:6.1f}s "
            f"export={result['seconds']:6.1f}s {result['events'] / result['seconds']:>9,.0f} ev/s "
            f"peak_rss_growth={result['peak'] / 2**20:7.1f} MiB "
            f"bundle={result['bytes'] / 2**20:6.1f} MiB"
        )
    keys = workdir / "keys.json"
    keys.write_text(
        json.dumps(
            {"keys": [{"kid": k.kid, "public_key": k.public_key} for k in audit_signing_key_list()]}
        )
    )
    bundle = workdir / "exports" / results["large"]["file"]
    verify = _phase("--phase", "verify", "--bundle", str(bundle), "--keys", str(keys))
    print(
        f"verify events={verify['events']:>9,} {verify['seconds']:6.1f}s "
        f"{verify['events'] / verify['seconds']:>9,.0f} ev/s "
        f"peak_rss_growth={verify['peak'] / 2**20:7.1f} MiB  (offline, no Django)"
    )
    naive = _phase(
        "--phase", "naive", "--bundle", str(workdir / "naive.jsonl"), "--limit", str(args.small)
    )
    print(
        f"naive events={naive['events']:>9,} {naive['seconds']:6.1f}s "
        f"{naive['events'] / naive['seconds']:>9,.0f} ev/s "
        f"peak_rss_growth={naive['peak'] / 2**20:7.1f} MiB  (list(queryset), then write)"
    )
    small, large = results["small"], results["large"]
    mem_ratio = large["peak"] / max(small["peak"], 1)
    naive_ratio = naive["peak"] / max(small["peak"], 1)
    print(
        f"{large['events'] / small['events']:.1f}x the events: streamed export peak memory "
        f"{mem_ratio:.2f}x; the naive export takes {naive_ratio:.1f}x the streamed export's "
        f"memory at {naive['events']:,} events"
    )
    print(
        f"RESULT events_small={small['events']} events_large={large['events']} "
        f"export_eps_small={small['events'] / small['seconds']:.0f} "
        f"export_eps_large={large['events'] / large['seconds']:.0f} "
        f"peak_mib_small={small['peak'] / 2**20:.1f} "
        f"peak_mib_large={large['peak'] / 2**20:.1f} "
        f"mem_ratio_large_vs_small={mem_ratio:.2f} "
        f"naive_peak_mib_small={naive['peak'] / 2**20:.1f} "
        f"naive_vs_stream_mem={naive_ratio:.1f} "
        f"verify_eps_large={verify['events'] / verify['seconds']:.0f} "
        f"verify_peak_mib_large={verify['peak'] / 2**20:.1f}"
    )


if __name__ == "__main__":
    main()
