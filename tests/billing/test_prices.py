"""The price book: seeded with sources, versioned, never rewritten, no overlaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import AuditEvent
from billing.errors import InvalidPrice, PriceAlreadySuperseded, PriceOverlap
from billing.models import ModelPrice, PoolPrice
from billing.selectors import model_price_resolve, pool_price_resolve
from billing.services import (
    model_price_correct,
    model_price_create,
    pool_price_create,
)

pytestmark = pytest.mark.django_db

RATES = {"input_per_mtok": "1.00", "cached_input_per_mtok": "0.10", "output_per_mtok": "4.00"}


def test_the_seed_carries_gemini_anthropic_and_openai_prices_with_sources(price_book) -> None:
    pro = price_book[("vertex", "gemini-2.5-pro")]
    assert (pro.input_per_mtok, pro.cached_input_per_mtok, pro.storage_per_mtok_hour) == (
        Decimal("1.25"),
        Decimal("0.125"),
        Decimal("4.50"),
    )
    assert (pro.long_threshold_tokens, pro.long_input_per_mtok) == (200_000, Decimal("2.50"))
    assert "vertex-context-cache.md" in pro.source
    sonnet = price_book[("anthropic", "claude-sonnet-4-5")]
    base = sonnet.input_per_mtok
    assert sonnet.cache_write_5m_per_mtok == base * Decimal("1.25")
    assert sonnet.cache_write_1h_per_mtok == base * 2
    assert sonnet.cached_input_per_mtok == base / 10
    assert "1.25x" in sonnet.source
    gpt = price_book[("openai", "gpt-5")]
    assert gpt.cache_write_5m_per_mtok == gpt.input_per_mtok  # no write premium before 5.6
    assert all(p.source.strip() for p in price_book.values())


def test_a_change_adds_a_version_and_closes_the_current_one_at_its_start(
    price_book, platform_actor
) -> None:
    start = timezone.now() + timedelta(days=1)
    old = price_book[("vertex", "gemini-2.5-flash")]
    new = model_price_create(
        actor=platform_actor,
        provider="vertex",
        model="gemini-2.5-flash",
        rates={**RATES, "storage_per_mtok_hour": "1.00"},
        source="test",
        effective_from=start,
    )
    old.refresh_from_db()
    # v1 was seeded, v2 is billing.0004's audio correction: the change is v3.
    assert new.version == old.version + 1 and old.effective_to == start
    assert old.input_per_mtok == Decimal("0.30")  # history untouched
    before = model_price_resolve(
        provider="vertex", model="gemini-2.5-flash", at=start - timedelta(seconds=1)
    )
    after = model_price_resolve(provider="vertex", model="gemini-2.5-flash", at=start)
    assert (before.pk, after.pk) == (old.pk, new.pk)
    event = AuditEvent.objects.filter(action="billing.price.create").latest("seq")
    assert event.details["closed_version"] == old.version and event.tenant_id is None


def test_write_rates_default_to_input_and_storage_to_zero(platform_actor) -> None:
    price = model_price_create(
        actor=platform_actor, provider="openai", model="gpt-test", rates=RATES, source="test"
    )
    assert price.cache_write_5m_per_mtok == price.cache_write_1h_per_mtok == Decimal("1.00")
    assert price.storage_per_mtok_hour == 0


def test_a_back_dated_change_is_rejected_and_nothing_is_written(price_book, platform_actor) -> None:
    count = ModelPrice.objects.count()
    with pytest.raises(PriceOverlap):
        model_price_create(
            actor=platform_actor,
            provider="vertex",
            model="gemini-2.5-pro",
            rates=RATES,
            source="test",
            effective_from=timezone.now() - timedelta(days=1),
        )
    assert ModelPrice.objects.count() == count
    assert price_book[("vertex", "gemini-2.5-pro")].effective_to is None
    assert (
        ModelPrice.objects.get(pk=price_book[("vertex", "gemini-2.5-pro")].pk).effective_to is None
    )


def test_overlapping_closed_ranges_are_rejected(platform_actor) -> None:
    t = datetime(2027, 1, 1, tzinfo=UTC)
    model_price_create(
        actor=platform_actor,
        provider="openai",
        model="gpt-x",
        rates=RATES,
        source="a",
        effective_from=t,
        effective_to=t + timedelta(days=30),
    )
    with pytest.raises(PriceOverlap) as caught:
        model_price_create(
            actor=platform_actor,
            provider="openai",
            model="gpt-x",
            rates=RATES,
            source="b",
            effective_from=t + timedelta(days=10),
            effective_to=t + timedelta(days=40),
        )
    assert caught.value.code == "price_overlap"
    # Filling the gap before it, without overlap, is allowed (it prices unpriced time).
    model_price_create(
        actor=platform_actor,
        provider="openai",
        model="gpt-x",
        rates=RATES,
        source="c",
        effective_from=t - timedelta(days=30),
        effective_to=t,
    )
    assert ModelPrice.objects.filter(model="gpt-x").count() == 2


def test_the_database_itself_refuses_overlapping_live_versions(price_book) -> None:
    pro = price_book[("vertex", "gemini-2.5-pro")]
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelPrice.objects.create(
            provider="vertex",
            model="gemini-2.5-pro",
            version=99,
            effective_from=pro.effective_from + timedelta(days=1),
            input_per_mtok=1,
            cached_input_per_mtok=1,
            cache_write_5m_per_mtok=1,
            cache_write_1h_per_mtok=1,
            output_per_mtok=1,
            source="bypassing the service",
        )


@pytest.mark.parametrize(
    "bad",
    [
        {"input_per_mtok": "-1"},
        {"cached_input_per_mtok": "abc"},
        {"output_per_mtok": "NaN"},
        {"output_per_mtok": None},
        {"storage_per_mtok_hour": "-0.01"},
        {"input_per_mtok": "0.0000001"},
        {"long_input_per_mtok": "2"},  # a long-tier rate without a threshold
        {"long_threshold_tokens": 200_000},  # a threshold without long-tier rates
    ],
)
def test_bad_rates_are_rejected_and_nothing_is_written(platform_actor, bad) -> None:
    before = (ModelPrice.objects.count(), AuditEvent.objects.count())
    with pytest.raises(InvalidPrice) as caught:
        model_price_create(
            actor=platform_actor,
            provider="openai",
            model="gpt-bad",
            rates={**RATES, **bad},
            source="test",
        )
    assert caught.value.code == "invalid_price"
    assert (ModelPrice.objects.count(), AuditEvent.objects.count()) == before


def test_an_unknown_provider_or_a_missing_source_is_rejected(platform_actor) -> None:
    with pytest.raises(InvalidPrice):
        model_price_create(
            actor=platform_actor, provider="azure", model="m", rates=RATES, source="x"
        )
    with pytest.raises(InvalidPrice):
        model_price_create(
            actor=platform_actor, provider="openai", model="m", rates=RATES, source="  "
        )
    assert not ModelPrice.objects.filter(model="m").exists()


def test_a_correction_replaces_a_version_over_its_range_and_keeps_the_old_one(
    price_book, platform_actor
) -> None:
    old = price_book[("anthropic", "claude-haiku-4-5")]
    fixed = model_price_correct(
        actor=platform_actor,
        price=old,
        rates={
            "input_per_mtok": "0.80",
            "cached_input_per_mtok": "0.08",
            "cache_write_5m_per_mtok": "1.00",
            "cache_write_1h_per_mtok": "1.60",
            "output_per_mtok": "4.00",
        },
        source="corrected from the provider's invoice",
        note="typo in v1",
    )
    old.refresh_from_db()
    assert old.superseded_by_id == fixed.pk and old.superseded_at is not None
    assert old.input_per_mtok == Decimal("1.00")  # the mistaken version is kept as it was
    assert (fixed.effective_from, fixed.effective_to, fixed.version) == (
        old.effective_from,
        old.effective_to,
        2,
    )
    at = old.effective_from + timedelta(days=3)
    assert model_price_resolve(provider="anthropic", model="claude-haiku-4-5", at=at).pk == fixed.pk
    event = AuditEvent.objects.filter(action="billing.price.correct").latest("seq")
    assert event.changes["input_per_mtok"] == {"before": "1.000000", "after": "0.800000"}
    with pytest.raises(PriceAlreadySuperseded):
        model_price_correct(actor=platform_actor, price=old, rates=RATES, source="again")


def test_pool_prices_are_versioned_by_pool_name(platform_actor) -> None:
    start = timezone.now()
    first = pool_price_create(
        actor=platform_actor,
        pool="a100-b",
        rates={
            "gpu_hour_usd": "1.80",
            "prefill_tokens_per_gpu_second": "8000",
            "decode_tokens_per_gpu_second": "600",
            "kv_blocks_per_gpu": 5000,
        },
        source="internal capacity plan",
        effective_from=start,
    )
    assert first.kv_block_tokens == 16
    assert pool_price_resolve(pool="a100-b", at=start + timedelta(hours=1)).pk == first.pk
    with pytest.raises(InvalidPrice):
        pool_price_create(
            actor=platform_actor,
            pool="a100-c",
            rates={
                "gpu_hour_usd": "1",
                "prefill_tokens_per_gpu_second": "0",
                "decode_tokens_per_gpu_second": "1",
                "kv_blocks_per_gpu": 1,
            },
            source="x",
        )
    assert not PoolPrice.objects.filter(pool="a100-c").exists()
