"""Budget shapes: budgets with their current period, inputs, the secret shown once, alerts."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import (
    Budget,
    BudgetAlert,
    BudgetPeriod,
)
from controlplane.display_text import display_text_validator
from controlplane.outbound import url_redacted


class BudgetPeriodOut(serializers.Serializer[BudgetPeriod]):
    """The current period's figures, from ``billing.selectors.budget_figures`` (the same
    function the console's pages and live tile read)."""

    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    spent_micros = serializers.IntegerField(help_text="Booked spend this period (µ$, rounded).")
    spent_nanos = serializers.IntegerField(
        help_text="Booked spend this period, exact nano-USD: Σ ledger + Σ storage."
    )
    reserved_micros = serializers.IntegerField(help_text="Held for work in flight.")
    limit_micros = serializers.IntegerField()
    committed_micros = serializers.IntegerField(help_text="spent + reserved.")
    remaining_micros = serializers.IntegerField(help_text="limit - spent - reserved, >= 0.")
    used_percent = serializers.FloatField(help_text="committed as % of the limit.")
    alert_basis = serializers.CharField(
        help_text="What thresholds compare: spent_plus_reserved (the hard limit's basis)."
    )


class BudgetOut(serializers.ModelSerializer[Budget]):
    current_period = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "name",
            "principal",
            "period",
            "starts_at",
            "ends_at",
            "limit_micros",
            "thresholds",
            "hard_limit",
            "webhook_url",
            "created_at",
            "updated_at",
            "archived_at",
            "current_period",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Budget) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if not self.context.get("reveal_webhook"):
            # Readers without budgets.update see the scheme and host only.
            data["webhook_url"] = url_redacted(data.get("webhook_url") or "")
        return data

    @extend_schema_field(BudgetPeriodOut(allow_null=True))
    def get_current_period(self, budget: Budget) -> dict[str, Any] | None:
        figure = self.context.get("figures", {}).get(budget.pk)
        if figure is None or figure.period_start is None:
            return None
        return BudgetPeriodOut(figure.as_dict()).data


class BudgetSecretOut(BudgetOut):
    webhook_secret = serializers.CharField(
        help_text="HMAC-SHA256 key of the alert webhooks. Shown only now; store it."
    )

    class Meta(BudgetOut.Meta):
        fields = [*BudgetOut.Meta.fields, "webhook_secret"]
        read_only_fields = fields


class BudgetCreateInput(serializers.Serializer[None]):
    name = serializers.CharField(max_length=100, validators=[display_text_validator])
    period = serializers.CharField(max_length=16, help_text="day, month or custom (UTC).")
    limit_micros = serializers.IntegerField(help_text="Integer micro-USD (1 USD = 1000000).")
    thresholds = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        max_length=50,
        help_text="Whole percentages 1-100 (default 50, 80, 100); one alert each per period.",
    )
    hard_limit = serializers.BooleanField(required=False, default=True)
    principal = serializers.UUIDField(
        required=False, allow_null=True, help_text="A service account of this tenant."
    )
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(required=False, allow_null=True)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class BudgetUpdateInput(serializers.Serializer[None]):
    name = serializers.CharField(
        max_length=100, required=False, validators=[display_text_validator]
    )
    limit_micros = serializers.IntegerField(required=False)
    thresholds = serializers.ListField(
        child=serializers.IntegerField(), required=False, max_length=50
    )
    hard_limit = serializers.BooleanField(required=False)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    period = serializers.CharField(required=False, help_text="Immutable: rejected if given.")


class BudgetAlertOut(serializers.ModelSerializer[BudgetAlert]):
    budget_name = serializers.CharField(source="budget.name")
    period_start = serializers.DateTimeField(source="period.period_start")
    period_end = serializers.DateTimeField(source="period.period_end")

    class Meta:
        model = BudgetAlert
        fields = [
            "id",
            "budget",
            "budget_name",
            "period_start",
            "period_end",
            "threshold",
            "spent_micros",
            "limit_micros",
            "created_at",
            "webhook_state",
            "webhook_attempts",
            "webhook_last_error",
            "webhook_delivered_at",
        ]
        read_only_fields = fields
