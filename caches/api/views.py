"""Cache self-service API: thin adapters over caches.services and caches.selectors."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from caches import selectors
from caches.api import serializers as s
from caches.content import CacheContent
from caches.errors import CacheNotFound, InvalidContent
from caches.models import CacheObject, CacheState, Provider
from caches.services import lifecycle
from controlplane.api.tenancy import TenantScopedMixin
from controlplane.api.validation import validated

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Replaying a POST with the same key returns the original operation.",
)


def _content_dict(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "system_instruction": data.get("system_instruction", ""),
        "tools": [dict(t) for t in data.get("tools", [])],
        "documents": [dict(d) for d in data.get("documents", [])],
    }


@extend_schema(tags=["caches"])
class CacheViewSet(TenantScopedMixin, viewsets.GenericViewSet[CacheObject]):
    """Cache objects of a tenant."""

    audit_entity = "caches.cache"
    action_permissions = {
        "list": "caches.list",
        "create": "caches.create",
        "retrieve": "caches.get",
        "timeline": "caches.get",
        "extend": "caches.update",
        "policy": "caches.update",
        "evict": "caches.delete",
        "lint": "caches.get",
        "operation": "caches.get",
    }
    serializer_class = s.CacheOut

    def _cache(self, cache_id: str) -> CacheObject:
        cache = selectors.cache_get(tenant=self.tenant, cache_id=cache_id)
        if cache is None:
            raise CacheNotFound("No such cache.")
        return cache

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, enum=CacheState.values),
            OpenApiParameter("provider", str, enum=Provider.values),
            OpenApiParameter("model", str),
        ],
        responses={200: s.CacheOut(many=True)},
    )
    def list(self, request: Request, tenant: str) -> Response:
        state = request.query_params.get("state")
        provider = request.query_params.get("provider")
        if state and state not in CacheState.values:
            raise InvalidContent(f"Unknown state {state!r}.")
        if provider and provider not in Provider.values:
            raise InvalidContent(f"Unknown provider {provider!r}.")
        qs = selectors.cache_list(
            tenant=self.tenant,
            state=state,
            provider=provider,
            model=request.query_params.get("model"),
        )
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(s.CacheOut(page, many=True).data)

    @extend_schema(
        request=s.CacheCreateInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses={202: s.OperationOut, 200: s.OperationOut},
        description="Starts creation (202 with the operation). A live cache with the same "
        "content and model, or a replayed Idempotency-Key, returns the existing operation (200).",
    )
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.CacheCreateInput, request.data)
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 1 <= len(key) <= 200:
            raise InvalidContent("Idempotency-Key must be 1-200 characters.")
        spec = lifecycle.CacheSpec(
            name=data["name"],
            provider=data["provider"],
            model=data["model"],
            content=_content_dict(data["content"]),
            ttl_seconds=data.get("ttl_seconds"),
            ttl_policy=data["ttl_policy"],
            replication_factor=data["replication_factor"],
            prewarm_cron=data["prewarm_cron"],
        )
        outcome = lifecycle.cache_create(
            tenant=self.tenant, actor=self.actor(), spec=spec, idempotency_key=key
        )
        code = status.HTTP_202_ACCEPTED if outcome.created else status.HTTP_200_OK
        response = Response(s.OperationOut(outcome.operation).data, status=code)
        response["Location"] = f"{request.path.rstrip('/')}/{outcome.operation.cache_id}"
        return response

    @extend_schema(responses={200: s.CacheDetailOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        return Response(s.CacheDetailOut(self._cache(pk)).data)

    @extend_schema(responses={200: s.TransitionOut(many=True)})
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, tenant: str, pk: str) -> Response:
        cache = self._cache(pk)
        transitions = selectors.cache_timeline(tenant=self.tenant, cache=cache)[:500]
        return Response(s.TransitionOut(transitions, many=True).data)

    @extend_schema(request=s.CacheExtendInput, responses={202: s.OperationOut})
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, tenant: str, pk: str) -> Response:
        data = validated(s.CacheExtendInput, request.data)
        op = lifecycle.cache_extend_ttl(
            cache=self._cache(pk), actor=self.actor(), ttl_seconds=data["ttl_seconds"]
        )
        return Response(s.OperationOut(op).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=s.CachePolicyInput, responses={200: s.CacheOut})
    @action(detail=True, methods=["post"])
    def policy(self, request: Request, tenant: str, pk: str) -> Response:
        data = validated(s.CachePolicyInput, request.data)
        cache = lifecycle.cache_set_policy(
            cache=self._cache(pk),
            actor=self.actor(),
            ttl_policy=data["ttl_policy"],
            ttl_seconds=data.get("ttl_seconds"),
            prewarm_cron=data.get("prewarm_cron"),
        )
        return Response(s.CacheOut(cache).data)

    @extend_schema(request=None, responses={202: s.OperationOut})
    @action(detail=True, methods=["post"])
    def evict(self, request: Request, tenant: str, pk: str) -> Response:
        op = lifecycle.cache_evict(cache=self._cache(pk), actor=self.actor())
        return Response(s.OperationOut(op).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=s.LintInput, responses={200: s.LintOut})
    @action(detail=False, methods=["post"])
    def lint(self, request: Request, tenant: str) -> Response:
        data = validated(s.LintInput, request.data)
        content = _content_dict(data["content"])
        findings = lifecycle.cache_lint(content=content)
        digest = CacheContent.from_dict(content).digest()
        return Response({"findings": findings, "content_digest": digest})

    @extend_schema(responses={200: s.OperationOut})
    @action(detail=False, methods=["get"], url_path="operations/<str:op>")
    def operation(self, request: Request, tenant: str, op: str) -> Response:
        operation = selectors.cache_operation_get(tenant=self.tenant, operation_id=op)
        if operation is None:
            raise CacheNotFound("No such operation.")
        return Response(s.OperationOut(operation).data)
