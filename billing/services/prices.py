"""Editing the price book: new versions and corrections, never rewriting history.

Rules (one per key, i.e. (provider, model) or a pool):
- Live versions' ranges ``[effective_from, effective_to)`` never overlap (an exclusion
  constraint backs the check below against concurrent writers).
- A **change** adds a version. Its range may overlap exactly one live version: the
  open-ended current one, provided the change starts now or later and after it; that
  version is then closed at the change's start (the only column of an existing version a
  change writes). Anything else that overlaps is rejected with ``price_overlap``; a
  back-dated change is rejected, since it would alter prices already charged.
- A **correction** replaces a mistaken version's rates over its exact range: the old
  version is kept and marked superseded, the new one takes its place, and
  ``cacheplane billing reprice --since ...`` then recomputes the affected usage.
Every write is audited on the platform chain in the same transaction. The rates themselves
are validated by ``billing.services.price_rates``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from audit.services import audit_record
from audit.snapshot import EMPTY, diff, model_snapshot
from billing.errors import InvalidPrice, PriceAlreadySuperseded, PriceOverlap
from billing.models import ModelPrice, PoolPrice, Provider
from billing.services.price_rates import (
    POOL_FIELDS,
    model_rates_clean,
    model_rates_merge,
    pool_rates_clean,
)
from controlplane.redis import keys
from tenants.actor import Actor

logger = logging.getLogger(__name__)


def _lock_key(kind: str, key: dict[str, str]) -> None:
    # Serializes writers of one key so the overlap check and the version number are
    # decided on a stable set of rows (the exclusion constraint is the backstop).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"billing.price:{kind}:" + ":".join(key.values())],
        )


def _overlaps(
    a_from: datetime, a_to: datetime | None, b_from: datetime, b_to: datetime | None
) -> bool:
    return (b_to is None or a_from < b_to) and (a_to is None or b_from < a_to)


# The two concrete price-version models (PriceVersionBase is abstract: no manager).
_Price = TypeVar("_Price", ModelPrice, PoolPrice)


#: Redis pub/sub channel told after every committed price change: the gateway's price
#: cache (``gateway.pricing``) empties itself on each message, so a new price applies to
#: holds at once, not when a cached entry times out.
PRICES_CHANNEL = keys.prices_changed_channel()


def _prices_changed_on_commit() -> None:
    def publish() -> None:
        from controlplane import ops

        try:
            ops.redis_client().publish(PRICES_CHANNEL, "1")
        except Exception:  # the cache's own expiry (60 s) still bounds the staleness
            logger.warning("price change not published to the gateways", exc_info=True)

    transaction.on_commit(publish)


def _version_create(
    *,
    cls: type[_Price],
    key: dict[str, str],
    values: dict[str, Any],
    actor: Actor,
    effective_from: datetime | None,
    effective_to: datetime | None,
    source: str,
    note: str,
    audit_action: str,
) -> _Price:
    now = timezone.now()
    start = effective_from or now
    if effective_to is not None and effective_to <= start:
        raise PriceOverlap("effective_to must be after effective_from.")
    if not source.strip():
        raise InvalidPrice("source is required: say where this price comes from.")
    with transaction.atomic():
        _lock_key(cls.__name__, key)
        live = list(
            cls.objects.filter(**key, superseded_at__isnull=True).order_by("effective_from")
        )
        clashing = [
            v for v in live if _overlaps(start, effective_to, v.effective_from, v.effective_to)
        ]
        truncated = None
        if clashing:
            current = clashing[0]
            truncatable = (
                len(clashing) == 1
                and current.effective_to is None
                and current.effective_from < start
                and start >= now
            )
            if not truncatable:
                raise PriceOverlap(
                    "The new price overlaps an existing version; a change must start now or "
                    "later and after the current version (use a correction to fix history).",
                    details={"overlaps": [v.version for v in clashing]},
                )
            truncated = current
            truncated.effective_to = start
            truncated.save(update_fields=["effective_to"])
        version = (cls.objects.filter(**key).aggregate(v=Max("version"))["v"] or 0) + 1
        try:
            with transaction.atomic():
                price = cls.objects.create(
                    **key,
                    **values,
                    version=version,
                    effective_from=start,
                    effective_to=effective_to,
                    source=source,
                    note=note,
                    created_by=actor.principal,
                )
        except IntegrityError:
            raise PriceOverlap("A concurrent change overlaps this price version.") from None
        price.refresh_from_db()  # the audit row records values exactly as stored
        audit_record(
            actor=actor,
            action=audit_action,
            tenant=None,
            target_type=cls.__name__.lower(),
            target_id=str(price.pk),
            changes=diff(EMPTY, model_snapshot(price)),
            details={
                **key,
                "source": source,
                "closed_version": truncated.version if truncated else None,
            },
        )
        _prices_changed_on_commit()
    return price


def _version_correct(
    *,
    price: _Price,
    values: dict[str, Any],
    actor: Actor,
    key: dict[str, str],
    source: str,
    note: str,
    audit_action: str,
) -> _Price:
    cls = type(price)
    if not source.strip():
        raise InvalidPrice("source is required: say where the corrected price comes from.")
    with transaction.atomic():
        _lock_key(cls.__name__, key)
        old = cls.objects.select_for_update().get(pk=price.pk)
        if old.superseded_at is not None:
            raise PriceAlreadySuperseded(
                "This version was already corrected; correct the version that replaced it.",
                details={"superseded_by": old.superseded_by_id},
            )
        before = model_snapshot(old)
        old.superseded_at = timezone.now()
        old.save(update_fields=["superseded_at"])
        version = (cls.objects.filter(**key).aggregate(v=Max("version"))["v"] or 0) + 1
        new = cls.objects.create(
            **key,
            **values,
            version=version,
            effective_from=old.effective_from,
            effective_to=old.effective_to,
            source=source,
            note=note,
            created_by=actor.principal,
        )
        old.superseded_by = new
        old.save(update_fields=["superseded_by"])
        new.refresh_from_db()
        audit_record(
            actor=actor,
            action=audit_action,
            tenant=None,
            target_type=cls.__name__.lower(),
            target_id=str(new.pk),
            changes=diff(before, model_snapshot(new)),
            details={**key, "corrects": old.pk, "source": source, "note": note},
        )
        _prices_changed_on_commit()
    return new


def model_price_create(
    *,
    actor: Actor,
    provider: str,
    model: str,
    rates: dict[str, Any],
    source: str,
    effective_from: datetime | None = None,
    effective_to: datetime | None = None,
    note: str = "",
) -> ModelPrice:
    """Add a price version for (provider, model); see the module rules.

    Raises InvalidPrice, PriceOverlap. Audited as ``billing.price.create``.
    """
    if provider not in Provider.values:
        raise InvalidPrice(f"Unknown provider {provider!r}.", details={"provider": provider})
    if not model or len(model) > 200:
        raise InvalidPrice("model must be 1-200 characters.")
    return _version_create(
        cls=ModelPrice,
        key={"provider": provider, "model": model},
        values=model_rates_clean(rates),
        actor=actor,
        effective_from=effective_from,
        effective_to=effective_to,
        source=source,
        note=note,
        audit_action="billing.price.create",
    )


def model_price_correct(
    *, actor: Actor, price: ModelPrice, rates: dict[str, Any], source: str, note: str = ""
) -> ModelPrice:
    """Replace a mistaken version's rates over its range (the old one is kept, superseded).

    Only the fields named in ``rates`` change (see :func:`model_rates_merge`). Raises
    InvalidPrice, PriceAlreadySuperseded. Audited as ``billing.price.correct``.
    """
    return _version_correct(
        price=price,
        values=model_rates_clean(model_rates_merge(price=price, changes=rates)),
        actor=actor,
        key={"provider": price.provider, "model": price.model},
        source=source,
        note=note,
        audit_action="billing.price.correct",
    )


def pool_price_create(
    *,
    actor: Actor,
    pool: str,
    rates: dict[str, Any],
    source: str,
    effective_from: datetime | None = None,
    effective_to: datetime | None = None,
    note: str = "",
) -> PoolPrice:
    """Add a GPU price version for a worker pool. Audited as ``billing.pool_price.create``."""
    if not pool or len(pool) > 100:
        raise InvalidPrice("pool must be 1-100 characters.")
    return _version_create(
        cls=PoolPrice,
        key={"pool": pool},
        values=pool_rates_clean(rates),
        actor=actor,
        effective_from=effective_from,
        effective_to=effective_to,
        source=source,
        note=note,
        audit_action="billing.pool_price.create",
    )


def pool_price_correct(
    *, actor: Actor, price: PoolPrice, rates: dict[str, Any], source: str, note: str = ""
) -> PoolPrice:
    """Replace a mistaken pool price over its range. Audited as ``billing.pool_price.correct``."""
    merged = {name: getattr(price, name) for name in POOL_FIELDS} | dict(rates)
    return _version_correct(
        price=price,
        values=pool_rates_clean(merged),
        actor=actor,
        key={"pool": price.pool},
        source=source,
        note=note,
        audit_action="billing.pool_price.correct",
    )
