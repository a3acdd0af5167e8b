"""Platform routes for the IdP group → role mapping (platform admins only)."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.tenancy import PlatformMixin
from controlplane.api.validation import validated
from identity.api import serializers as s
from identity.models import GroupMapping
from identity.services import mappings
from tenants.errors import TenantNotFound
from tenants.models import Tenant


class _ByCreated(CursorPagination):
    ordering = "-created_at"
    page_size = 100


@extend_schema(tags=["platform"])
class GroupMappingViewSet(PlatformMixin, viewsets.GenericViewSet[GroupMapping]):
    """IdP groups mapped to tenant roles; reconciled at each single sign-on login."""

    audit_entity = "identity.group_mapping"
    action_permissions = {
        "list": "tenants.list",
        "create": "tenants.manage",
        "destroy": "tenants.manage",
    }
    serializer_class = s.GroupMappingOut
    pagination_class = _ByCreated

    def get_queryset(self) -> QuerySet[GroupMapping]:
        return mappings.group_mapping_list()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.GroupMappingOut(page, many=True).data)

    @extend_schema(request=s.GroupMappingCreateInput, responses={201: s.GroupMappingOut})
    def create(self, request: Request) -> Response:
        data = validated(s.GroupMappingCreateInput, request.data)
        tenant = Tenant.objects.filter(slug=data["tenant"]).first()
        if tenant is None:
            raise TenantNotFound("Not found.")
        mapping = mappings.group_mapping_create(
            actor=self.actor(), tenant=tenant, group=data["group"], role=data["role"]
        )
        return Response(s.GroupMappingOut(mapping).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: OpenApiResponse(description="Deleted.")})
    def destroy(self, request: Request, pk: str) -> Response:
        mappings.group_mapping_delete(actor=self.actor(), mapping_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
