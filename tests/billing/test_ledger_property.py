"""Property test of the money path (issue 23.1): random sequences of gateway requests,
batch rows, cache lifecycles, price corrections, reprices, period boundaries and Redis
restarts; after every step, for every period, the REST figure, the PostgreSQL counter and
the Redis counter equal Σ ledger + Σ storage of the period, to the nano-dollar.

Steps call the services directly (no HTTP) and sequences are short, so thousands run in
seconds. The count is the ``CACHEPLANE_LEDGER_PROPERTY_SEQUENCES`` setting (env var of
the same name): the plain suite runs 30, CI's step ``45-ledger-property.sh``
runs 2,000. Derandomized and without an example database: the same sequences every run.

The tenant, the actor and the price book are created once per test; each sequence runs
in a savepoint that is rolled back afterwards, and starts on an empty Redis database (the
test's own), so every sequence sees the same fresh world and the tables do not grow from
one sequence to the next (issue 23: the run time stays linear in the sequence count).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.models import Budget, BudgetPeriod, ModelPrice
from billing.pricing import nanos_to_micros
from billing.selectors.budgets import budget_figures
from billing.services import budget_reservations as holds
from billing.services import budget_reserve, budget_settle, storage_accrue
from billing.services.budget_periods import budget_period_ensure
from billing.services.prices import model_price_correct
from billing.services.reprice import usage_reprice
from billing.services.usage import cache_creation_record, usage_flush, usage_record
from controlplane import ops
from tests.billing.ledger_support import FLASH_LITE, gateway_request
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db
PRO = "gemini-2.5-pro"
_serial = itertools.count()

# Hours relative to the start of this month: negative ones fall in the previous month.
hours = st.integers(min_value=-3, max_value=3)
step = st.one_of(
    st.tuples(st.just("request"), hours, st.integers(1, 400)),
    st.tuples(st.just("batch"), hours, st.integers(0, 50_000), st.integers(0, 2_000)),
    st.tuples(st.just("cache_open"), hours, st.integers(1, 120_000)),
    st.tuples(st.just("cache_accrue"), st.integers(1, 90), st.integers(-1, 1)),
    st.tuples(st.just("cache_close")),
    st.tuples(st.just("flush")),
    st.tuples(st.just("price_correct"), st.integers(1, 9)),
    st.tuples(st.just("reprice")),
    st.tuples(st.just("redis_restart")),
    st.tuples(st.just("budget_new"), hours),
)


@dataclass
class _Cache:
    id: str
    tokens: int
    start: datetime
    accrued_to: datetime
    hold: object


@dataclass
class _World:
    tenant: object
    actor: object
    month: datetime
    periods: list[BudgetPeriod] = field(default_factory=list)
    caches: list[_Cache] = field(default_factory=list)
    views: dict[bool, list[holds.PeriodView]] = field(default_factory=dict)

    def at(self, hour: int) -> datetime:
        return self.month + timedelta(hours=hour, minutes=7)

    def budget(self, at: datetime) -> None:
        # The ORM row, not budget_create: its audit chain would dominate the run time,
        # and budget_create is tested on its own. Periods are created (seeded from the
        # ledger) exactly as the gateway's first request would.
        budget = Budget.objects.create(
            tenant=self.tenant, name=f"b{len(self.periods)}", period="month", limit_micros=10**13
        )
        for moment in (self.month - timedelta(hours=1), self.month):
            period = budget_period_ensure(budget=budget, at=moment)
            assert period is not None
            self.periods.append(period)
        self.load()

    def load(self) -> None:
        """The gateway's view of the periods in Redis (loaded again after a restart)."""
        for current in (False, True):
            self.views[current] = holds.budget_periods_load(
                tenant_id=str(self.tenant.pk),
                principal_id=None,
                at=self.month if current else self.month - timedelta(hours=1),
            )


def _run(world: _World, name: str, *args: int) -> None:
    tenant = world.tenant
    if name == "request":
        gateway_request(
            tenant,
            at=world.at(args[0]),
            prompt_tokens=args[1],
            periods=world.views[args[0] >= 0],
        )
    elif name == "batch":
        usage_record(
            tenant=tenant,
            request_id=f"batch-{next(_serial)}",
            provider="vertex",
            model=PRO,
            occurred_at=world.at(args[0]),
            prompt_tokens=args[1],
            output_tokens=args[2],
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
        if cache.hold is not None:  # None: no budget applied when it opened
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
        world.budget(world.at(args[0]))


_FIGURES_SQL = """
SELECT p.id, p.spent_nanos, p.spent_micros,
  COALESCE((SELECT sum(u.cost_nanos) FROM billing_usagerecord u WHERE u.tenant_id = p.tenant_id
            AND u.occurred_at >= p.period_start AND u.occurred_at < p.period_end), 0)
  + COALESCE((SELECT sum(a.cost_nanos) FROM billing_storageaccrual a
              WHERE a.tenant_id = p.tenant_id
              AND a.hour >= p.period_start AND a.hour < p.period_end), 0)
FROM billing_budgetperiod p WHERE p.tenant_id = %s ORDER BY p.id
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


def _check_rest(world: _World, now: datetime, ledger: dict[int, int]) -> None:
    """The figure the REST API serializes (``budget_figures``) equals the ledger's (``ledger``:
    :func:`_check`'s Σ ledger + Σ storage per period, from the raw rows)."""
    current = [p for p in world.periods if p.period_start <= now < p.period_end]
    assert current
    shown = budget_figures(tenant=world.tenant, budgets=[p.budget for p in current], at=now)
    for period in current:
        assert shown[period.budget_id].spent_nanos == ledger[period.pk]


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


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_every_figure_equals_the_ledger_after_every_step(
    actor, price_book, usage_queue, django_capture_on_commit_callbacks
):
    now = timezone.now()
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    tenant = TenantFactory()
    # The first budget and its two periods, created once: each sequence starts from them
    # (rolled back to them) and loads them into its empty Redis, as a gateway would.
    first = _World(tenant=tenant, actor=actor, month=month)
    with django_capture_on_commit_callbacks(execute=True):
        first.budget(month)
    loaded = _redis_dump(usage_queue)  # the gateway's load of them, as Redis holds it

    @hypothesis_settings(
        max_examples=settings.CACHEPLANE_LEDGER_PROPERTY_SEQUENCES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(step, min_size=1, max_size=6))
    def sequence(steps: list[tuple]) -> None:
        _redis_restore(usage_queue, loaded)  # the previous sequence's keys gone
        with transaction.atomic():
            _sequence(steps)
            transaction.set_rollback(True)  # the next sequence starts from the same rows

    def _sequence(steps: list[tuple]) -> None:
        world = _World(
            tenant=tenant,
            actor=actor,
            month=month,
            periods=list(first.periods),
            views=dict(first.views),
        )
        _check(world)
        for name, *args in steps:
            with django_capture_on_commit_callbacks(execute=True):
                _run(world, name, *args)
            _check(world)
        with django_capture_on_commit_callbacks(execute=True):
            _run(world, "flush")
        _check_rest(world, now, _check(world))

    sequence()
