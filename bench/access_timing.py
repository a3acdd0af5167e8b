"""Benchmark: "missing" and "forbidden" must take the same time (no existence oracle).

    .venv/bin/python bench/access_timing.py [--tries 200] [--warmup 40] [--port 18101]

Starts the real application (``controlplane.asgi:application`` under uvicorn, in its own
process, serving HTTP, WebSocket and the gateway) against a scratch database (DATABASE_URL
and REDIS_URL if set, else embedded PostgreSQL and Redis, as the other benchmarks do),
creates two tenants, and times, for each entry point, a reference that exists but is
forbidden to the caller against one that exists nowhere:

* ``rest``: ``GET /api/v1/tenants/{t}/iam-policy`` as tenant B's admin (session), t = A vs
  a slug no tenant has;
* ``rest_key``: ``GET /api/v1/tenants/{t}/caches`` with tenant B's API key, same pair;
* ``console``: ``GET /t/{t}/`` (session);
* ``object``: ``GET /api/v1/tenants/B/caches/{id}``, id = one of A's caches vs a fresh
  random id (a new id on every try on both sides);
* ``gateway``: ``POST /v1/chat/completions`` with B's key naming ``cache`` = one of A's
  cache names vs a name nobody has (a new name on every try, so the gateway's
  directory cache never answers);
* ``websocket``: open ``ws/t/{t}/live`` with B's session until the server refuses it.

Every try must get the same answer on both sides (404, the socket refused). Tries are
interleaved pairwise in a random order per pair, after ``--warmup`` tries, so that load
from other processes hits both series alike. A try is ``--repeat`` back-to-back pairs
and counts each side's fastest (see ``_pairs``); the first repetition alone is reported
too (``raw``). Prints the median of each series and their difference, and ends with:

    RESULT rest_diff_ms=... rest_key_diff_ms=... console_diff_ms=... object_diff_ms=...
    gateway_diff_ms=... websocket_diff_ms=... max_abs_diff_ms=... raw_max_abs_diff_ms=...
    control_diff_ms=... tries=200 repeat=3

(diff = median forbidden − median missing; ``control`` runs the same request on both
sides, the noise floor at the machine's current load). Target: every |diff| ≤ 1 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from support import REPO, scratch_django

GHOST = "no-such-tenant"


def _arrange(caches: int) -> dict:
    """Tenants A and B, B's admin (session) and B's key, ``caches`` live caches in A."""
    from django.conf import settings
    from django.test import Client

    from caches.models import CacheObject
    from tenants.actor import Actor
    from tenants.models import Role, RoleBinding
    from tenants.services import keys
    from tenants.services.iam import service_account_create
    from tenants.services.tenants import human_principal_create, tenant_create

    cli = Actor.cli()
    alice = human_principal_create(actor=cli, username="alice", password=None)
    bob = human_principal_create(actor=cli, username="bob", password=None)
    a = tenant_create(actor=cli, slug="tenant-a", display_name="A", admin=alice)
    b = tenant_create(actor=cli, slug="tenant-b", display_name="B", admin=bob)
    robot = service_account_create(actor=cli, tenant=b, name="robot")
    RoleBinding.objects.create(
        tenant=b, principal=robot, role=Role.objects.get(name="tenant.developer")
    )
    issued = keys.api_key_create(
        actor=Actor(principal=bob, auth_method="cli"), tenant=b, name="k", principal=robot
    )
    rows = [
        CacheObject(
            tenant=a,
            name=f"a-cache-{i:05d}",
            provider="vllm",
            model="bench/ref",
            content={},
            content_digest=f"{i:064x}",
            ttl_seconds=600,
            state="active",
        )
        for i in range(caches)
    ]
    CacheObject.objects.bulk_create(rows)
    client = Client()
    client.force_login(bob, backend=settings.AUTHENTICATION_BACKENDS[-1])
    return {
        "a": a.slug,
        "b": b.slug,
        "cookie": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "key": issued.plaintext,
        "cache_ids": [str(c.pk) for c in rows],
        "cache_names": [c.name for c in rows],
    }


def _serve(port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CACHEPLANE_LOG_LEVEL": "ERROR"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "controlplane.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--lifespan",
            "off",
        ],
        cwd=REPO,
        env=env,
    )
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except httpx.HTTPError:
            if server.poll() is not None:
                raise SystemExit("the server exited during start-up") from None
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("the server did not start within 60 s")


@dataclass
class Series:
    """One entry point's timings (seconds): per try, the fastest of its repetitions
    (``best``) and its first repetition alone (``raw``)."""

    best: dict[str, list[float]] = field(default_factory=lambda: {"forbidden": [], "missing": []})
    raw: dict[str, list[float]] = field(default_factory=lambda: {"forbidden": [], "missing": []})

    def diff_ms(self, kind: str) -> float:
        series = getattr(self, kind)
        return (statistics.median(series["forbidden"]) - statistics.median(series["missing"])) * 1e3


def _pairs(
    name: str,
    forbidden: Callable[[int], int | str],
    missing: Callable[[int], int | str],
    *,
    tries: int,
    warmup: int,
    repeat: int,
    rng: random.Random,
) -> Series:
    """``tries`` timed tries of each side, interleaved (random order within each pair).

    Each try is ``repeat`` back-to-back pairs, and counts the fastest time of each side:
    load from other processes only ever adds time, so the fastest of a few is the cost
    of the work itself (``timeit``'s rule), which is what an attacker filtering noise
    would compare. ``call(n)`` gets a number never passed before on that side, for
    references that must be fresh on every request.
    """
    series = Series()
    n = 0
    answers: dict[str, int | str] = {}
    for i in range(warmup + tries):
        took: dict[str, list[float]] = {"forbidden": [], "missing": []}
        for _ in range(repeat):
            sides = [("forbidden", forbidden), ("missing", missing)]
            rng.shuffle(sides)
            for side, call in sides:
                started = time.perf_counter()
                answers[side] = call(n)
                took[side].append(time.perf_counter() - started)
            n += 1
            if answers["forbidden"] != answers["missing"]:
                raise SystemExit(
                    f"{name}: forbidden answered {answers['forbidden']!r}, "
                    f"missing {answers['missing']!r}"
                )
        if i >= warmup:
            for side, times in took.items():
                series.best[side].append(min(times))
                series.raw[side].append(times[0])
    best_f, best_m = (statistics.median(series.best[s]) * 1e3 for s in ("forbidden", "missing"))
    print(
        f"{name:10s} forbidden {best_f:7.2f} ms  missing {best_m:7.2f} ms  "
        f"diff {series.diff_ms('best'):+6.2f} ms  |  raw diff {series.diff_ms('raw'):+6.2f} ms "
        f"(IQR {_iqr(series.raw['forbidden']):5.1f}/{_iqr(series.raw['missing']):5.1f} ms)  "
        f"answer: {answers['missing']}",
        flush=True,
    )
    return series


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) * 1000


def _ws_refusal(url: str, cookie: str, origin: str) -> str:
    """Open the socket; the close (or HTTP refusal) the server answers with."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    try:
        with connect(
            url, additional_headers={"Cookie": f"sessionid={cookie}"}, origin=origin
        ) as socket:
            try:
                socket.recv(timeout=5)
            except Exception as closed:  # the close frame ends the receive
                return f"closed {getattr(getattr(closed, 'rcvd', None), 'code', '?')}"
            return "open"
    except InvalidStatus as refused:
        return f"http {refused.response.status_code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--repeat", type=int, default=3, help="back-to-back pairs per try; the fastest counts"
    )
    parser.add_argument("--port", type=int, default=18101)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--only", default="", help="comma-separated subset of the entry points (default: all)"
    )
    args = parser.parse_args()
    caches = (args.tries + args.warmup) * args.repeat
    with scratch_django("access_timing"):
        import httpx

        world = _arrange(caches)
        server = _serve(args.port)
        try:
            base = f"http://127.0.0.1:{args.port}"
            session = httpx.Client(base_url=base, cookies={"sessionid": world["cookie"]})
            keyed = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {world['key']}"})
            rng = random.Random(args.seed)
            a, b = world["a"], world["b"]
            results: dict[str, Series] = {}

            wanted = set(filter(None, args.only.split(",")))

            def get(client: httpx.Client, path: str) -> int:
                return client.get(path).status_code

            def run(name: str, forbidden, missing) -> None:
                if not wanted or name in wanted:
                    results[name] = _pairs(name, forbidden, missing, **common)

            common = {
                "tries": args.tries,
                "warmup": args.warmup,
                "repeat": args.repeat,
                "rng": rng,
            }
            # An A/A control: the same request on both sides. Its "difference" is what
            # the machine's noise alone produces at this load (not part of the target).
            run(
                "control",
                lambda n: get(session, f"/api/v1/tenants/{GHOST}/iam-policy"),
                lambda n: get(session, f"/api/v1/tenants/{GHOST}/iam-policy"),
            )
            run(
                "rest",
                lambda n: get(session, f"/api/v1/tenants/{a}/iam-policy"),
                lambda n: get(session, f"/api/v1/tenants/{GHOST}/iam-policy"),
            )
            run(
                "rest_key",
                lambda n: get(keyed, f"/api/v1/tenants/{a}/caches"),
                lambda n: get(keyed, f"/api/v1/tenants/{GHOST}/caches"),
            )
            run(
                "console",
                lambda n: get(session, f"/t/{a}/"),
                lambda n: get(session, f"/t/{GHOST}/"),
            )
            run(
                "object",
                lambda n: get(session, f"/api/v1/tenants/{b}/caches/{world['cache_ids'][n]}"),
                lambda n: get(session, f"/api/v1/tenants/{b}/caches/{uuid.uuid4()}"),
            )

            def invoke(reference: str) -> str:
                response = keyed.post(
                    "/v1/chat/completions",
                    json={
                        "model": "bench/ref",
                        "max_tokens": 1,
                        "messages": [{"role": "user", "content": "hi"}],
                        "cache": reference,
                    },
                )
                return f"{response.status_code} {response.json()['error'].get('code')}"

            run(
                "gateway",
                lambda n: invoke(world["cache_names"][n]),
                lambda n: invoke(f"m-cache-{n:05d}"),
            )
            ws_base = f"ws://127.0.0.1:{args.port}/ws/t"
            run(
                "websocket",
                lambda n: _ws_refusal(f"{ws_base}/{a}/live", world["cookie"], base),
                lambda n: _ws_refusal(f"{ws_base}/{GHOST}/live", world["cookie"], base),
            )
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    control = results.pop("control", None)
    diffs = {name: series.diff_ms("best") for name, series in results.items()}
    raw = max(abs(series.diff_ms("raw")) for series in results.values())
    noise = f" control_diff_ms={control.diff_ms('best'):+.2f}" if control is not None else ""
    fields = " ".join(f"{name}_diff_ms={d:+.2f}" for name, d in diffs.items())
    worst = max(abs(d) for d in diffs.values())
    print(
        f"RESULT {fields} max_abs_diff_ms={worst:.2f} raw_max_abs_diff_ms={raw:.2f}{noise} "
        f"tries={args.tries} repeat={args.repeat}"
    )


if __name__ == "__main__":
    main()
