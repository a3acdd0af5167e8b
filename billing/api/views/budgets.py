"""Tenant routes: budgets and their alerts."""

from __future__ import annotations

import uuid

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api import serializers as s
from billing.api.views._common import _BUDGET_ID, _ByCreated, _uuid
from billing.models import Budget, BudgetAlert
from billing.services import budget_crud as budget_services
from controlplane.api.tenancy import TenantScopedMixin
from controlplane.api.validation import validated
from controlplane.errors import NotFound, ValidationFailed


@extend_schema(tags=["billing"])
class BudgetViewSet(TenantScopedMixin, viewsets.GenericViewSet[Budget]):
    """Budgets of this tenant (or of one of its service accounts) with their current period."""

    audit_entity = "billing.budget"
    action_permissions = {
        "list": "budgets.get",
        "retrieve": "budgets.get",
        "create": "budgets.update",
        "partial_update": "budgets.update",
        "destroy": "budgets.update",
        "rotate_secret": "budgets.update",
    }
    serializer_class = s.BudgetOut
    pagination_class = _ByCreated

    def _out(
        self,
        budgets: Budget | list[Budget],
        serializer_class: type[s.BudgetOut] = s.BudgetOut,
        many: bool = False,
    ) -> object:
        items = budgets if isinstance(budgets, list) else [budgets]
        figures = selectors.budget_figures(tenant=self.tenant, budgets=items, at=timezone.now())
        # Only writers see a webhook's full URL (receivers' tokens live in it).
        reveal = "budgets.update" in getattr(self, "held", frozenset())
        return serializer_class(
            budgets, many=many, context={"figures": figures, "reveal_webhook": reveal}
        ).data

    def _budget(self, pk: str) -> Budget:
        budget = selectors.budget_get(tenant=self.tenant, budget_id=_uuid(pk))
        if budget is None:
            raise NotFound("No such budget.")
        return budget

    @extend_schema(responses={200: s.BudgetOut(many=True)})
    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(selectors.budget_list(tenant=self.tenant)) or []
        return self.get_paginated_response(self._out(page, many=True))

    @extend_schema(parameters=[_BUDGET_ID], responses={200: s.BudgetOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        return Response(self._out(self._budget(pk)))

    @extend_schema(request=s.BudgetCreateInput, responses={201: s.BudgetSecretOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.BudgetCreateInput, request.data)
        budget = budget_services.budget_create(
            actor=self.actor(),
            tenant=self.tenant,
            name=data["name"],
            period=data["period"],
            limit_micros=data["limit_micros"],
            thresholds=data.get("thresholds", list(budget_services.DEFAULT_THRESHOLDS)),
            hard_limit=data.get("hard_limit", True),
            principal_id=str(data["principal"]) if data.get("principal") else None,
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            webhook_url=data.get("webhook_url", ""),
        )
        response = Response(self._out(budget, s.BudgetSecretOut), status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(
        parameters=[_BUDGET_ID], request=s.BudgetUpdateInput, responses={200: s.BudgetOut}
    )
    def partial_update(self, request: Request, tenant: str, pk: str) -> Response:
        budget = self._budget(pk)
        changes = dict(validated(s.BudgetUpdateInput, request.data))
        budget = budget_services.budget_update(actor=self.actor(), budget=budget, changes=changes)
        return Response(self._out(budget))

    @extend_schema(parameters=[_BUDGET_ID], responses={204: None})
    def destroy(self, request: Request, tenant: str, pk: str) -> Response:
        budget_services.budget_archive(actor=self.actor(), budget=self._budget(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[_BUDGET_ID], request=None, responses={200: s.BudgetSecretOut})
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, tenant: str, pk: str) -> Response:
        budget = budget_services.budget_rotate_secret(actor=self.actor(), budget=self._budget(pk))
        response = Response(self._out(budget, s.BudgetSecretOut))
        response["Cache-Control"] = "no-store"
        return response


@extend_schema(tags=["billing"])
class BudgetAlertViewSet(TenantScopedMixin, viewsets.GenericViewSet[BudgetAlert]):
    """Threshold alerts of this tenant's budgets, newest first."""

    audit_entity = "billing.budget_alert"
    action_permissions = {"list": "budgets.get"}
    serializer_class = s.BudgetAlertOut
    pagination_class = _ByCreated

    @extend_schema(
        parameters=[OpenApiParameter("budget", OpenApiTypes.UUID)],
        responses={200: s.BudgetAlertOut(many=True)},
    )
    def list(self, request: Request, tenant: str) -> Response:
        budget_id = request.query_params.get("budget") or None
        if budget_id is not None:
            try:
                budget_id = str(uuid.UUID(budget_id))
            except ValueError:
                raise ValidationFailed("budget must be a UUID.") from None
        alerts = selectors.budget_alert_list(tenant=self.tenant, budget_id=budget_id)
        page = self.paginate_queryset(alerts)
        return self.get_paginated_response(s.BudgetAlertOut(page, many=True).data)
