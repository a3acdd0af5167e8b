"""Budgets, their periods, reservations (holds) and threshold alerts."""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q

from tenants.models import Tenant
from tenants.scoping import TenantScopedManager


class BudgetPeriodKind(models.TextChoices):
    DAY = "day", "Calendar day (UTC)"
    MONTH = "month", "Calendar month (UTC)"
    CUSTOM = "custom", "Custom range"


def _new_webhook_secret() -> str:
    return "whsec_" + secrets.token_hex(24)


class Budget(models.Model):
    """A spend limit of a tenant (or of one of its service accounts) per period.

    ``thresholds`` are percentages that raise one alert each per period; with
    ``hard_limit`` a request that would take spent plus reserved over the limit is refused
    before any work is done. ``webhook_secret`` signs alert webhooks; the API shows it
    only when it is created or rotated.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="A service account of the tenant; null: the whole tenant.",
    )
    name = models.CharField(max_length=100)
    period = models.CharField(max_length=8, choices=BudgetPeriodKind.choices)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    limit_micros = models.BigIntegerField()
    thresholds = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)
    hard_limit = models.BooleanField(default=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=64, default=_new_webhook_secret)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.CheckConstraint(name="budget_limit_positive", condition=Q(limit_micros__gt=0)),
            models.CheckConstraint(
                name="budget_custom_has_range",
                condition=~Q(period="custom")
                | Q(starts_at__isnull=False, ends_at__isnull=False, ends_at__gt=F("starts_at")),
            ),
        ]
        indexes = [models.Index(fields=["tenant", "archived_at", "created_at"])]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.name}"


class BudgetPeriod(models.Model):
    """A budget's counters for one period: what was spent and what is reserved.

    ``spent_nanos`` moves only through the ledger's booking path
    (``billing.services.ledger_booking``): every ledger row and storage accrual of the
    period adds its exact cost when it is booked; holds (``reserved_micros``) are
    reservations only and never add spend.

    Reservations increment ``reserved_micros`` with one conditional UPDATE (``spent +
    reserved + x <= limit``), which PostgreSQL serializes on the row: concurrent requests
    can never reserve past the limit.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="periods")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    limit_micros = models.BigIntegerField()
    hard_limit = models.BooleanField(default=True)
    spent_micros = models.BigIntegerField(
        default=0, help_text="spent_nanos rounded half-even (kept in step by every write)."
    )
    spent_nanos = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="Exact spend: the sum of the period's ledger rows and storage accruals.",
    )
    reserved_micros = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "budget", "period_start"], name="budget_period_unique"
            ),
            models.CheckConstraint(
                name="budget_period_reserved_non_negative", condition=Q(reserved_micros__gte=0)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.period_start:%Y-%m-%d}"


class ReservationState(models.TextChoices):
    HELD = "held", "Held"
    SETTLED = "settled", "Settled"
    RELEASED = "released", "Released"
    EXPIRED = "expired", "Expired (released by the sweeper)"


class BudgetReservation(models.Model):
    """Money held against budget periods while a request (or a cache's TTL) runs.

    Settled with the actual cost, released on failure, or expired by a beat task when
    nobody came back (no reservation leaks). ``period_ids`` lists every budget period the
    hold was taken on (a tenant budget and a service-account budget at once).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal_id = models.UUIDField(null=True, blank=True)
    request_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, default="request")
    amount_micros = models.BigIntegerField()
    actual_micros = models.BigIntegerField(null=True, blank=True)
    period_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    state = models.CharField(
        max_length=16, choices=ReservationState.choices, default=ReservationState.HELD
    )
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "request_id"], name="budget_reservation_unique_request"
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"], condition=Q(state="held"), name="reservation_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.amount_micros}µ$ {self.state}"


class WebhookState(models.TextChoices):
    NONE = "none", "No webhook configured"
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class BudgetAlert(models.Model):
    """A budget period crossed a threshold (raised once per threshold per period).

    ``spent_micros`` is the figure that crossed it: spent + reserved at that moment (the
    alert basis, ``billing.selectors.budgets.ALERT_BASIS``).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="alerts")
    period = models.ForeignKey(BudgetPeriod, on_delete=models.PROTECT, related_name="alerts")
    threshold = models.PositiveSmallIntegerField()
    spent_micros = models.BigIntegerField()
    limit_micros = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    webhook_state = models.CharField(
        max_length=16, choices=WebhookState.choices, default=WebhookState.NONE
    )
    webhook_attempts = models.PositiveIntegerField(default=0)
    webhook_last_error = models.CharField(max_length=500, blank=True)
    webhook_delivered_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()  # fail closed: queries must name a tenant

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "period", "threshold"], name="budget_alert_once_per_threshold"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.threshold}%"
