"""Property test of the money path (issue 23.1): random sequences of gateway requests,
batch rows, timed-out requests booked as estimates and their corrections, vLLM warm-ups
and pin probes, cache lifecycles, price corrections, reprices, period boundaries, Redis
restarts, and tenant-wide and per-service-account budgets; after every step, for every
period, the REST figure, the PostgreSQL counter and the Redis counter equal Σ ledger +
Σ storage of the period (a service account's budget: its own rows, no storage), to the
nano-dollar.

Steps call the services directly (no HTTP) and sequences are short, so thousands run in
minutes. After every step the figure REST serializes (``budget_figures``, the one
selector behind the API, the console and the live tile) is compared for every current
period (at the end of a sequence for last month's too), and after every tenth sequence
the REST API itself (``GET …/budgets``). The count is the
``CACHEPLANE_LEDGER_PROPERTY_SEQUENCES`` setting (env var of the same name): the plain
suite runs 30, CI's step ``45-ledger-property.sh`` runs 2,000. Derandomized and without
an example database: the same sequences every run.

The tenant, its service account, the first budgets (one tenant-wide, one of the service
account), a vLLM cache with its create and refresh operations, an open Vertex cache with
its storage hold, a timed-out request booked as an estimate and the price book are
created once per test; each sequence runs in a savepoint that is rolled back afterwards,
and starts on the Redis database as it was then (the budgets loaded), so every sequence
sees the same fresh world and the tables do not grow from one sequence to the next
(issue 23: the run time stays linear in the sequence count).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.models import Budget, BudgetPeriod, BudgetReservation, ModelPrice, UsageRecord
from billing.pricing import nanos_to_micros
from billing.selectors.budgets import budget_figures
from billing.services import budget_reservations as holds
from billing.services import budget_reserve, budget_settle, storage_accrue
from billing.services.budget_periods import budget_period_ensure
from billing.services.prices import model_price_correct
from billing.services.reprice import usage_reprice
from billing.services.usage import (
    cache_creation_record,
    usage_estimate_correct,
    usage_flush,
    usage_record,
)
from caches.models import CacheObject, CacheOperation, CacheState, OperationKind
from caches.providers.base import Prefill, RemoteState
from caches.services.residency import prefills_book
from controlplane import ops
from tests.billing.ledger_support import FLASH_LITE, gateway_request
from tests.factories import ServiceAccountFactory

pytestmark = pytest.mark.django_db
PRO = "gemini-2.5-pro"
_serial = itertools.count()

# Hours relative to the start of this month: negative ones fall in the previous month.
hours = st.integers(min_value=-3, max_value=3)
# Who books: False the tenant (tenant-wide budgets only), True its service account (its
# own budgets apply as well).
who = st.booleans()
ARGS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "request": st.tuples(hours, st.integers(1, 400), who),
    "batch": st.tuples(hours, st.integers(0, 50_000), st.integers(0, 2_000), who),
    "timeout": st.tuples(hours, st.integers(1, 5_000), who),
    "correct": st.tuples(st.integers(0, 400), st.integers(0, 50)),
    "warmup": st.tuples(hours, st.integers(1, 9_000), st.integers(0, 9_000), st.booleans()),
    "cache_open": st.tuples(hours, st.integers(1, 120_000)),
    "cache_accrue": st.tuples(st.integers(1, 90), st.integers(-1, 1)),
    "cache_close": st.tuples(),
    "flush": st.tuples(),
    "price_correct": st.tuples(st.integers(1, 9)),
    "reprice": st.tuples(),
    "redis_restart": st.tuples(),
    "budget_new": st.tuples(hours, who),
}
# Bookings and cache lifecycles are drawn twice as often as the rest: a correction
# needs an estimate booked before it in the same sequence, an accrual an open cache, and
# the heavy steps (reprice, a new budget) need not be a tenth of all steps for the run to
# reach them hundreds of times.
NAMES = [*ARGS, "request", "batch", "timeout", "correct", "warmup", "cache_open", "cache_accrue"]
step = st.sampled_from(NAMES).flatmap(lambda name: ARGS[name].map(lambda a: (name, *a)))


@dataclass
class _Cache:
    id: str
    tokens: int
    start: datetime
    accrued_to: datetime
    hold: BudgetReservation | None  # None: no budget applied when it opened


@dataclass
class _World:
    tenant: Any
    actor: Any
    account: Any  # the tenant's service account
    month: datetime
    warm: CacheOperation | None = None  # a vLLM cache's create (warm-up) operation
    probe: CacheOperation | None = None  # and its refresh (pin probe) operation
    budgets: list[Budget] = field(default_factory=list)
    periods: list[BudgetPeriod] = field(default_factory=list)
    caches: list[_Cache] = field(default_factory=list)
    estimates: list[str] = field(default_factory=list)  # ledger keys booked as estimates
    views: dict[tuple[bool, bool], list[holds.PeriodView]] = field(default_factory=dict)

    def at(self, hour: int) -> datetime:
        return self.month + timedelta(hours=hour, minutes=7)

    def principal(self, account: bool) -> Any:
        return self.account if account else None

    def budget(self, at: datetime, *, account: bool = False) -> None:
        # The ORM row, not budget_create: its audit chain would dominate the run time,
        # and budget_create is tested on its own. Periods are created (seeded from the
        # ledger) exactly as the gateway's first request would.
        budget = Budget.objects.create(
            tenant=self.tenant,
            name=f"b{len(self.budgets)}",
            period="month",
            limit_micros=10**13,
            principal=self.principal(account),
        )
        self.budgets.append(budget)
        for moment in (self.month - timedelta(hours=1), self.month):
            period = budget_period_ensure(budget=budget, at=moment)
            assert period is not None
            self.periods.append(period)
        self.load()

    def load(self) -> None:
        """The gateway's view of the periods in Redis (loaded again after a restart): for
        its service account (every period: the tenant's and its own) and for the tenant's
        other callers (the tenant-wide ones), in either month."""
        tenant_wide = {str(b.pk) for b in self.budgets if b.principal_id is None}
        for current in (False, True):
            views = holds.budget_periods_load(
                tenant_id=str(self.tenant.pk),
                principal_id=str(self.account.pk),
                at=self.month if current else self.month - timedelta(hours=1),
            )
            self.views[current, True] = views
            self.views[current, False] = [v for v in views if v.budget_id in tenant_wide]


def _run(world: _World, name: str, *args: int) -> None:
    tenant = world.tenant
    if name == "request":
        gateway_request(
            tenant,
            at=world.at(args[0]),
            prompt_tokens=args[1],
            principal=world.principal(bool(args[2])),
            periods=world.views[args[0] >= 0, bool(args[2])],
        )
    elif name == "batch":
        principal = world.principal(bool(args[3]))
        usage_record(
            tenant=tenant,
            request_id=f"batch-{next(_serial)}",
            provider="vertex",
            model=PRO,
            occurred_at=world.at(args[0]),
            prompt_tokens=args[1],
            output_tokens=args[2],
            principal_id=str(principal.pk) if principal else None,
        )
    elif name == "timeout":  # sent, then no answer in time: the hold is booked as estimate
        world.estimates.append(
            gateway_request(
                tenant,
                at=world.at(args[0]),
                hold_micros=args[1],
                principal=world.principal(bool(args[2])),
                periods=world.views[args[0] >= 0, bool(args[2])],
                timed_out=True,
            )
        )
    elif name == "correct" and world.estimates:
        # Reconciliation: the provider reports what the timed-out request really used.
        key = world.estimates.pop(0)
        if not UsageRecord.objects.filter(tenant=tenant, request_id=key).exists():
            usage_flush()  # the provider's report comes later than the next flush
        usage_estimate_correct(
            tenant=tenant, ledger_key=key, prompt_tokens=args[0], output_tokens=args[1]
        )
    elif name == "warmup":
        # A vLLM warm-up (created by the service account) or pin probe (the scheduler)
        # reported by a worker: booked after commit as the cache's creation cost.
        op = world.probe if args[3] else world.warm
        assert op is not None
        op.attempts = next(_serial)  # a new attempt warms (and is booked) again
        prefills_book(
            op=op,
            cache=op.cache,
            remote=RemoteState(
                prefills=[
                    Prefill(
                        worker="w0",
                        pool="default",
                        request_id="cp-warm",
                        prompt_tokens=args[1],
                        cached_tokens=min(args[1], args[2]),
                        output_tokens=1,
                        resident_full=0,
                    )
                ]
            ),
            now=world.at(args[0]),
        )
    elif name == "cache_open":
        cache_id = f"c{next(_serial)}"
        start = world.at(args[0])
        hold = budget_reserve(
            tenant=tenant,
            principal=None,
            estimate_micros=args[1],
            request_id=f"cache:{cache_id}",
            kind="cache_storage",
        )
        cache_creation_record(
            tenant=tenant,
            cache_id=cache_id,
            operation_id=cache_id,
            provider="vertex",
            model=PRO,
            tokens=args[1],
            ttl_seconds=3600,
            occurred_at=start,
        )
        world.caches.append(_Cache(cache_id, args[1], start, start, hold))
    elif name == "cache_accrue" and world.caches:
        cache = world.caches[-1]
        end = cache.accrued_to + timedelta(minutes=args[0])
        tokens = max(1, cache.tokens + args[1] * 1000)  # a token-count change mid-life
        storage_accrue(
            tenant=tenant,
            cache_id=cache.id,
            provider="vertex",
            model=PRO,
            tokens=tokens,
            start=cache.start,
            end=end,
        )
        cache.tokens, cache.accrued_to = tokens, end
    elif name == "cache_close" and world.caches:
        cache = world.caches.pop()
        if cache.hold is not None:
            budget_settle(reservation=cache.hold, actual_micros=cache.tokens)
    elif name == "flush":
        usage_flush()
        holds.budget_settlements_flush()
    elif name == "price_correct":
        live = ModelPrice.objects.get(
            provider="vertex", model=FLASH_LITE, superseded_at__isnull=True
        )
        model_price_correct(
            actor=world.actor,
            price=live,
            rates={"input_per_mtok": str(Decimal(args[0]) / 10)},
            source="property test",
        )
    elif name == "reprice":
        usage_reprice(actor=world.actor, since=world.month - timedelta(days=1), tenant=tenant)
    elif name == "redis_restart":
        client = ops.redis_client()
        for period in world.periods:
            client.delete(*holds.period_keys(period.pk))
        world.load()  # the next request reloads: spent_nanos seeded from PostgreSQL
    elif name == "budget_new":
        world.budget(world.at(args[0]), account=bool(args[1]))


# Σ ledger + Σ storage of each period's window, from the raw rows: a service account's
# budget counts its own rows and no storage (storage has no principal).
_FIGURES_SQL = """
SELECT p.id, p.spent_nanos, p.spent_micros,
  COALESCE((SELECT sum(u.cost_nanos) FROM billing_usagerecord u WHERE u.tenant_id = p.tenant_id
            AND u.occurred_at >= p.period_start AND u.occurred_at < p.period_end
            AND (b.principal_id IS NULL OR u.principal_id = b.principal_id)), 0)
  + CASE WHEN b.principal_id IS NULL THEN
      COALESCE((SELECT sum(a.cost_nanos) FROM billing_storageaccrual a
                WHERE a.tenant_id = p.tenant_id
                AND a.hour >= p.period_start AND a.hour < p.period_end), 0)
    ELSE 0 END
FROM billing_budgetperiod p JOIN billing_budget b ON b.id = p.budget_id
WHERE p.tenant_id = %s ORDER BY p.id
"""


def _check(world: _World) -> dict[int, int]:
    """PostgreSQL = Redis = Σ ledger + Σ storage (raw rows) for every period: one query
    and one Redis round trip per step. Returns Σ ledger + Σ storage per period id."""
    with connection.cursor() as cursor:
        cursor.execute(_FIGURES_SQL, [world.tenant.pk])
        rows = cursor.fetchall()
    pipe = ops.redis_client().pipeline(transaction=False)
    for period_id, *_ in rows:
        pipe.hget(holds.period_keys(period_id)[0], "spent_nanos")
    live = pipe.execute()
    assert len(rows) == len(world.periods)
    for (period_id, pg, pg_micros, ledger), redis_nanos in zip(rows, live, strict=True):
        assert pg == int(redis_nanos) == ledger, (period_id, pg, redis_nanos, ledger)
        assert pg_micros == nanos_to_micros(pg)
    return {period_id: ledger for period_id, _, _, ledger in rows}


def _check_rest(world: _World, ledger: dict[int, int], *, months: int = 1) -> None:
    """The figure REST serializes (``budget_figures``) for every budget's current period
    (``months=2``: last month's too, as the selector reads it at a moment then) equals
    :func:`_check`'s Σ ledger + Σ storage of that period (from the raw rows)."""
    for at in (world.month, world.month - timedelta(hours=1))[:months]:
        shown = budget_figures(tenant=world.tenant, budgets=world.budgets, at=at)
        for period in world.periods:
            if period.period_start <= at < period.period_end:
                figure = shown[period.budget_id]
                assert figure.spent_nanos == ledger[period.pk], (period.pk, figure, ledger)
                assert figure.spent_micros == nanos_to_micros(ledger[period.pk])


def _check_api(world: _World, api: Any, now: datetime, ledger: dict[int, int]) -> None:
    """``GET /api/v1/tenants/{t}/budgets``: each budget's current period, exactly."""
    current = {p.budget_id: p for p in world.periods if p.period_start <= now < p.period_end}
    listed = api.get(f"/api/v1/tenants/{world.tenant.slug}/budgets?limit=100").json()
    shown = {item["id"]: item["current_period"] for item in listed["results"]}
    assert len(shown) == len(world.budgets)
    for budget_id, period in current.items():
        assert shown[str(budget_id)]["spent_nanos"] == ledger[period.pk]


def _redis_dump(client: Any) -> list[tuple[bytes, int, bytes]]:
    """Every key of the test's Redis database: (name, TTL in ms, DUMP payload)."""
    names = list(client.scan_iter(count=1000))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
        pipe.dump(name)
    replies = pipe.execute()
    return [(n, max(0, t), d) for n, t, d in zip(names, replies[::2], replies[1::2], strict=True)]


def _redis_restore(client: Any, dumped: list[tuple[bytes, int, bytes]]) -> None:
    """The test's Redis database exactly as dumped (FLUSHDB, then RESTORE every key)."""
    pipe = client.pipeline(transaction=True)
    pipe.flushdb()
    for name, ttl, payload in dumped:
        pipe.restore(name, ttl, payload)
    pipe.execute()


def _vllm_operations(world: _World) -> None:
    """A vLLM cache of the tenant with its create (by the service account) and refresh
    (the scheduler's pin) operations: what the warm-up and probe steps book under."""
    cache = CacheObject.objects.create(
        tenant=world.tenant,
        name="pinned",
        provider="vllm",
        model="test/ref-tiny",
        content={"system_instruction": "pinned"},
        content_digest="0" * 64,
        token_count=9_000,
        ttl_seconds=3_600,
        state=CacheState.ACTIVE,
        pool="default",
    )
    world.warm, world.probe = (
        CacheOperation.objects.create(
            tenant=world.tenant, cache=cache, kind=kind, requested_by=requested_by
        )
        for kind, requested_by in (
            (OperationKind.CREATE, world.account),
            (OperationKind.REFRESH, None),
        )
    )


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_every_figure_equals_the_ledger_after_every_step(
    tenant_a,
    admin_a,
    actor,
    api,
    price_book,
    usage_queue,
    django_capture_on_commit_callbacks,
    settings,
):
    # Live events go to a process-local channel layer: nobody listens here, and the
    # Redis channel layer's publish after every booking was a quarter of the run time
    # (the events themselves are tested with the console).
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    now = timezone.now()
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    api.force_authenticate(admin_a)
    # The first budgets (the tenant's and its service account's) and their periods,
    # created once: each sequence starts from them (rolled back to them) and loads them
    # into its Redis as a gateway would.
    first = _World(
        tenant=tenant_a, actor=actor, account=ServiceAccountFactory(tenant=tenant_a), month=month
    )
    _vllm_operations(first)
    with django_capture_on_commit_callbacks(execute=True):
        first.budget(month)
        first.budget(month, account=True)
        # Every sequence starts with a cache open (its storage held, its creation booked)
        # and a timed-out request in the ledger as an estimate, so accruals, closes and
        # corrections act in any sequence, not only after an open or a timeout drawn
        # earlier in the same one.
        _run(first, "cache_open", 0, 100_000)
        _run(first, "timeout", 0, 3_000, 1)
        _run(first, "flush")
    _check_rest(first, _check(first), months=2)
    loaded = _redis_dump(usage_queue)  # the gateway's load of them, as Redis holds it
    sequences = itertools.count()

    @hypothesis_settings(
        max_examples=settings.CACHEPLANE_LEDGER_PROPERTY_SEQUENCES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(step, min_size=1, max_size=6))
    def sequence(steps: list[tuple[Any, ...]]) -> None:
        _redis_restore(usage_queue, loaded)  # the previous sequence's keys gone
        with transaction.atomic():
            _sequence(steps)
            transaction.set_rollback(True)  # the next sequence starts from the same rows

    def _sequence(steps: list[tuple[Any, ...]]) -> None:
        world = _World(
            tenant=first.tenant,
            actor=actor,
            account=first.account,
            month=month,
            warm=first.warm,
            probe=first.probe,
            budgets=list(first.budgets),
            periods=list(first.periods),
            caches=[replace(cache) for cache in first.caches],
            estimates=list(first.estimates),
            views=dict(first.views),
        )
        _check_rest(world, _check(world))
        for name, *args in steps:
            with django_capture_on_commit_callbacks(execute=True):
                _run(world, name, *args)
            _check_rest(world, _check(world))
        with django_capture_on_commit_callbacks(execute=True):
            _run(world, "flush")
        ledger = _check(world)
        _check_rest(world, ledger, months=2)
        # The API renders the selector's figure; one request costs more than a whole
        # step (~20 ms), so every tenth sequence asks it (200 times in CI's 2,000).
        if next(sequences) % 10 == 0:
            _check_api(world, api, now, ledger)

    sequence()
