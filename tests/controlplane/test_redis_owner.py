"""Redis has one owner, ``controlplane.redis``: its keys, its scripts, its calling convention.

Two checks. Statically, no module outside the package runs Lua (``eval``, ``evalsha``,
``register_script``), holds Lua text, spells one of our key prefixes or reads the
settings that hold them. At run time, the writers of every key family are exercised
and the database is scanned: every key matches exactly one listed family, and every
family of ours was written.
"""

from __future__ import annotations

import ast
import asyncio
import fnmatch
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("controlplane", "tenants", "audit", "caches", "billing", "workers", "gateway")
APPS += ("frontend", "identity")
OWNER = ROOT / "controlplane" / "redis"
LIBRARY_OWNERS = {"channels_redis", "celery"}
SCRIPT_CALLS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "register_script", "script_load"}
PREFIX_SETTINGS = {
    "CACHEPLANE_BUDGET_REDIS_PREFIX",
    "CACHEPLANE_GATEWAY_RATELIMIT_PREFIX",
    "CACHEPLANE_BILLING_USAGE_QUEUE_KEY",
}


def _our_prefixes() -> list[str]:
    from controlplane.redis import keys

    patterns = keys.family_patterns()
    prefixes = []
    for family in keys.FAMILIES:
        if family.owner in LIBRARY_OWNERS:
            continue
        pattern = patterns[family.name]
        cut = min((i for i, c in enumerate(pattern) if c in "*?["), default=len(pattern))
        prefixes.append(pattern[:cut])
    return prefixes


def _modules() -> list[Path]:
    found = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if OWNER in path.parents or "migrations" in path.parts:
                continue
            if path.parent.name == "controlplane" and path.name.startswith("settings"):
                continue  # where the prefixes are configured
            found.append(path)
    return found


def _violations(path: Path, prefixes: list[str]) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            # ``model.eval()`` (torch) takes no argument; Redis's EVAL always does.
            if name in SCRIPT_CALLS and (name != "eval" or node.args):
                out.append(f"{where}:{node.lineno}: runs a script ({name})")
        elif isinstance(node, ast.Attribute) and node.attr in PREFIX_SETTINGS:
            out.append(f"{where}:{node.lineno}: reads {node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if "redis.call(" in text:
                out.append(f"{where}:{node.lineno}: Lua text outside lua/")
            elif any(text.startswith(prefix) for prefix in prefixes):
                out.append(f"{where}:{node.lineno}: spells a key ({text[:40]!r})")
    return out


def test_no_module_outside_the_redis_package_builds_keys_or_runs_lua() -> None:
    prefixes = _our_prefixes()
    assert "cp:kv:" in prefixes and "cacheplane:budget:" in prefixes
    violations = [v for path in _modules() for v in _violations(path, prefixes)]
    assert violations == []


def test_every_script_loads_with_its_includes_resolved() -> None:
    from controlplane.redis.scripts import ScriptIncludeError, _resolve, script, script_names

    names = script_names()
    assert {"budget_reserve", "budget_settle", "gateway_admit", "kv_route"} <= set(names)
    for name in names:
        source = script(name).source
        assert "#include" not in source, name
    admit = script("gateway_admit").source
    # Billing's reserve script is in the admission script by include, unchanged.
    reserve = (OWNER / "lua" / "budget_reserve.lua").read_text().rstrip("\n")
    assert reserve in admit
    with pytest.raises(ScriptIncludeError):
        _resolve("no_such_script.lua", ())


def _exercise_every_writer(tenant, admin) -> None:
    """Write at least one key of every family, through the code that writes it."""
    from billing.services import budget_reservations as holds
    from billing.services.budgets import budget_create
    from billing.services.usage import usage_batch_claim, usage_record_many
    from caches.services.hits import cache_hits_queue
    from controlplane import ops, task_health
    from controlplane.redis import keys
    from controlplane.redis.budget import budget_settle
    from controlplane.redis.gateway import RateCheck, RateScope, gateway_admit
    from tenants.services.throttling import (
        api_key_authenticate_throttled,
        unauthenticated_request_record,
    )
    from tests.factories import actor_for
    from workers import kv_index, load_state

    client = ops.redis_client()
    budget_create(
        actor=actor_for(admin),
        tenant=tenant,
        name="b",
        period="month",
        limit_micros=1000,
        hard_limit=True,
    )
    periods = holds.budget_periods_load(tenant_id=str(tenant.pk), principal_id=None)
    assert periods
    for hold_id in ("h1", "h2"):  # h1 is booked by the flush, h2 stays queued
        budget_settle(
            client,
            holds.settle_call(
                periods=periods,
                hold_id=hold_id,
                tenant_id=str(tenant.pk),
                principal_id=None,
                amount_micros=10,
                actual_micros=5,
            ),
        )
        if hold_id == "h1":
            assert holds.budget_settlements_flush().settlements == 1
    usage_record_many([b"x"])
    assert usage_batch_claim(batch_size=10) is not None
    pipe = client.pipeline()
    cache_hits_queue(pipe, cache_id="00000000-0000-0000-0000-000000000000", cached_tokens=1)
    load_state.queue_add(pipe, replica="r1", worker="w1", delta=1, now=time.time())
    pipe.zadd(load_state.reserved_key("w1"), {"m": time.time() + 60})
    pipe.execute()
    with pytest.raises(Exception):  # noqa: B017 - any rejection; the counter is the point
        api_key_authenticate_throttled(token="cpk_nope", source_ip="10.0.0.1")
    unauthenticated_request_record(
        source_ip="10.0.0.1", user_agent="t", entry_point="rest", path="/x"
    )
    task_health._record(task_health.WATCHED_TASKS[0], "successes", last_success="1")
    ops.worker_heartbeat_record()
    kv_index.apply_events(client, worker="w1", events=[_stored(1)])
    kv_index.mark_live(client, workers=["w1"])
    kv_index.record_hash_check(client, worker="w1", matched=1, mismatched=0)

    async def admit() -> None:
        scope = RateScope(
            scope=keys.ratelimit_scope_for_tenant(str(tenant.pk)),
            requests_per_minute=10,
            tokens_per_minute=0,
            concurrent_requests=0,
        )
        now = int(time.time() * 1000)
        reply = await gateway_admit(
            rate=RateCheck(scopes=[scope], now_ms=now, call_id="c", tokens=1, slot_expiry_ms=now),
            budget=None,
        )
        assert reply.outcome == "admitted"

    asyncio.run(admit())

    async def autopilot_sighting() -> None:
        from gateway.adapters.autopilot import place_breakpoints
        from gateway.adapters.hosted import HostedModel

        body = {"system": "s" * 8000, "messages": [{"role": "user", "content": "hi"}]}
        model = HostedModel("anthropic", "claude-sonnet-4-5", 64_000, 1024)
        await place_breakpoints(tenant_id=str(tenant.pk), model=model, body=body)

    asyncio.run(autopilot_sighting())


def _stored(block_hash: int) -> dict[str, object]:
    return {"type": "BlockStored", "medium": "GPU", "block_hashes": [block_hash]}


@pytest.mark.django_db(transaction=True)
def test_every_key_written_belongs_to_one_listed_family(redis_flush, tenant_a, admin_a) -> None:
    from controlplane.redis import keys

    _exercise_every_writer(tenant_a, admin_a)
    patterns = keys.family_patterns()
    seen: dict[str, set[str]] = {}
    for raw in redis_flush.scan_iter(count=1000):
        key = raw.decode()
        matches = [name for name, glob in patterns.items() if fnmatch.fnmatchcase(key, glob)]
        assert len(matches) == 1, (key, matches)
        seen.setdefault(matches[0], set()).add(key)
    ours = {f.name for f in keys.FAMILIES if f.owner not in LIBRARY_OWNERS}
    assert ours - set(seen) == set(), sorted(ours - set(seen))
