"""Gateway API: thin adapters over ``gateway.services``, ``gateway.selectors`` and
``gateway.provider_credentials``.

Rate limits: reading needs ``budgets.get``, writing ``budgets.update`` (limits on spend
and on throughput are managed by the same people). Provider credentials: reading needs
``provider_credentials.get``, writing ``provider_credentials.set``; a key is accepted,
never returned.
"""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.tenancy import TenantScopedMixin
from controlplane.api.validation import validated
from gateway import provider_credentials, selectors, services
from gateway.api import serializers as s
from gateway.models import HostedProvider, ProviderCredential, RateLimit

_ID = OpenApiParameter("pk", OpenApiTypes.UUID, OpenApiParameter.PATH)
_PROVIDER = OpenApiParameter(
    "provider", OpenApiTypes.STR, OpenApiParameter.PATH, enum=["anthropic", "openai", "deepseek"]
)


class _ByCreated(CursorPagination):
    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"
    ordering = "-created_at"


@extend_schema(tags=["gateway"])
class RateLimitViewSet(TenantScopedMixin, viewsets.GenericViewSet[RateLimit]):
    """Requests/min, tokens/min, concurrency and fair-share weight, per tenant or key."""

    audit_entity = "gateway.rate_limit"
    action_permissions = {
        "list": "budgets.get",
        "retrieve": "budgets.get",
        "create": "budgets.update",
        "partial_update": "budgets.update",
        "destroy": "budgets.update",
    }
    serializer_class = s.RateLimitOut
    pagination_class = _ByCreated

    def _limit(self, pk: str) -> RateLimit:
        try:
            found = selectors.rate_limit_get(tenant=self.tenant, rate_limit_id=str(uuid.UUID(pk)))
        except ValueError:
            found = None
        if found is None:
            raise services.RateLimitNotFound("No such rate limit.")
        return found

    @extend_schema(responses={200: s.RateLimitOut(many=True)})
    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(selectors.rate_limit_list(tenant=self.tenant))
        return self.get_paginated_response(s.RateLimitOut(page, many=True).data)

    @extend_schema(parameters=[_ID], responses={200: s.RateLimitOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        return Response(s.RateLimitOut(self._limit(pk)).data)

    @extend_schema(request=s.RateLimitCreateInput, responses={201: s.RateLimitOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = dict(validated(s.RateLimitCreateInput, request.data))
        api_key = data.pop("api_key", None)
        limit = services.rate_limit_create(
            tenant=self.tenant,
            actor=self.actor(),
            api_key_id=str(api_key) if api_key else None,
            values=data,
        )
        return Response(s.RateLimitOut(limit).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[_ID], request=s.RateLimitUpdateInput, responses={200: s.RateLimitOut}
    )
    def partial_update(self, request: Request, tenant: str, pk: str) -> Response:
        changes = dict(validated(s.RateLimitUpdateInput, request.data))
        limit = services.rate_limit_update(
            limit=self._limit(pk), actor=self.actor(), changes=changes
        )
        return Response(s.RateLimitOut(limit).data)

    @extend_schema(parameters=[_ID], responses={204: None})
    def destroy(self, request: Request, tenant: str, pk: str) -> Response:
        services.rate_limit_delete(limit=self._limit(pk), actor=self.actor())
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["gateway"])
class ProviderCredentialViewSet(TenantScopedMixin, viewsets.GenericViewSet[ProviderCredential]):
    """The tenant's hosted-provider keys (one per provider), and the cache autopilot switch."""

    audit_entity = "gateway.provider_credential"
    action_permissions = {
        "list": "provider_credentials.get",
        "retrieve": "provider_credentials.get",
        "update": "provider_credentials.set",
        "partial_update": "provider_credentials.set",
        "destroy": "provider_credentials.set",
    }
    serializer_class = s.ProviderCredentialOut
    pagination_class = None  # at most one row per provider
    lookup_field = "provider"

    def _credential(self, provider: str) -> ProviderCredential:
        # A provider that cannot exist never reaches SQL (a path may hold any character).
        found = (
            provider_credentials.provider_credential_list(tenant=self.tenant)
            .filter(provider=provider)
            .first()
            if provider in HostedProvider.values
            else None
        )
        if found is None:
            raise provider_credentials.ProviderCredentialNotFound("No key set for this provider.")
        return found

    @extend_schema(responses={200: s.ProviderCredentialOut(many=True)})
    def list(self, request: Request, tenant: str) -> Response:
        rows = provider_credentials.provider_credential_list(tenant=self.tenant)
        return Response(s.ProviderCredentialOut(rows, many=True).data)

    @extend_schema(parameters=[_PROVIDER], responses={200: s.ProviderCredentialOut})
    def retrieve(self, request: Request, tenant: str, provider: str) -> Response:
        return Response(s.ProviderCredentialOut(self._credential(provider)).data)

    @extend_schema(
        parameters=[_PROVIDER],
        request=s.ProviderCredentialSetInput,
        responses={200: s.ProviderCredentialOut, 201: s.ProviderCredentialOut},
    )
    def update(self, request: Request, tenant: str, provider: str) -> Response:
        """Set the key (201) or rotate it (200)."""
        data = validated(s.ProviderCredentialSetInput, request.data)
        existed = provider in HostedProvider.values and (
            provider_credentials.provider_credential_get(tenant=self.tenant, provider=provider)
            is not None
        )
        provider_credentials.provider_credential_set(
            tenant=self.tenant,
            actor=self.actor(),
            provider=provider,
            secret=data["api_key"],
            cache_autopilot=data.get("cache_autopilot"),
        )
        return Response(
            s.ProviderCredentialOut(self._credential(provider)).data,
            status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
        )

    @extend_schema(
        parameters=[_PROVIDER],
        request=s.ProviderCredentialUpdateInput,
        responses={200: s.ProviderCredentialOut},
    )
    def partial_update(self, request: Request, tenant: str, provider: str) -> Response:
        data = validated(s.ProviderCredentialUpdateInput, request.data)
        provider_credentials.provider_credential_update(
            credential=self._credential(provider),
            actor=self.actor(),
            cache_autopilot=data["cache_autopilot"],
        )
        return Response(s.ProviderCredentialOut(self._credential(provider)).data)

    @extend_schema(parameters=[_PROVIDER], responses={204: None})
    def destroy(self, request: Request, tenant: str, provider: str) -> Response:
        provider_credentials.provider_credential_delete(
            credential=self._credential(provider), actor=self.actor()
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
