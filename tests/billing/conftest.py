"""Billing fixtures: the seeded price book, a GPU pool price, a clean usage queue."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday, well inside the seeded prices


@pytest.fixture
def price_book(db):
    """The seeded price book (restored if a transactional test flushed the tables)."""
    from billing.models import ModelPrice
    from tests.billing.ledger_support import price_book_restore

    price_book_restore()
    return {(p.provider, p.model): p for p in ModelPrice.objects.filter(superseded_at__isnull=True)}


@pytest.fixture
def pool_price(db):
    """A GPU pool: $2.50/GPU-hour, 10k prefill and 1k decode tokens/GPU-s, 10k KV blocks."""
    from billing.models import PoolPrice

    return PoolPrice.objects.create(
        pool="h100-a",
        version=1,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        gpu_hour_usd=Decimal("2.50"),
        prefill_tokens_per_gpu_second=Decimal(10_000),
        decode_tokens_per_gpu_second=Decimal(1_000),
        kv_blocks_per_gpu=10_000,
        kv_block_tokens=16,
        source="test fixture",
    )


@pytest.fixture
def usage_queue(redis_flush):
    """A clean Redis database for the usage queue (and its flush lock)."""
    return redis_flush


@pytest.fixture
def actor(admin_a):
    from tests.factories import actor_for

    return actor_for(admin_a)


@pytest.fixture
def platform_actor(platform_admin):
    from tests.factories import actor_for

    return actor_for(platform_admin)


@pytest.fixture
def celery_eager():
    """Run ``.delay()`` inline, as a worker would (the broker is the network boundary)."""
    from controlplane.celery import app

    previous = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = previous
