"""Audit API: event search, exports (create, status, download) and the signing keys.

Permissions: every tenant route needs ``audit.export`` at the tenant (searching the log
discloses the same data an export does, so ``iam.get`` is not enough); platform routes
need ``audit.export_platform``. The signing keys are public: they are public keys, and
an offline verifier must be able to fetch them without credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.models import QuerySet
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import selectors
from audit.api import serializers as s
from audit.errors import UnknownTenant
from audit.models import AuditEvent, AuditExport
from audit.services.exports import ExportRequest, audit_export_create, audit_export_download
from controlplane.api.pagination import DefaultCursorPagination
from controlplane.api.tenancy import ActionPermissionMixin, PlatformMixin, TenantScopedMixin
from controlplane.api.validation import validated
from tenants.models import Tenant

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="A replay with the same key returns the original export.",
)
DOWNLOAD_RESPONSES = {
    (200, "application/zip"): OpenApiResponse(
        response=OpenApiTypes.BINARY,
        description="The signed bundle: manifest.json, events.jsonl, digests.jsonl and the "
        "CSV/OCSF view. Verify with `cacheplane audit verify`.",
    ),
    409: OpenApiResponse(description="export_not_ready"),
    410: OpenApiResponse(description="export_file_missing"),
}


class _BySeq(DefaultCursorPagination):
    page_size = 100
    max_page_size = 500
    page_size_query_param = "page_size"
    ordering = "-seq"


class _ByCreated(DefaultCursorPagination):
    page_size = 50
    max_page_size = 500
    page_size_query_param = "page_size"
    ordering = "-created_at"


@extend_schema(tags=["audit"])
class TenantAuditEventViewSet(TenantScopedMixin, viewsets.GenericViewSet[AuditEvent]):
    """The tenant's audit events, newest first, filtered like an export."""

    audit_entity = "audit.event"
    action_permissions = {"list": "audit.export"}
    serializer_class = s.AuditEventOut
    pagination_class = _BySeq

    @extend_schema(parameters=[s.AuditEventSearchInput])
    def list(self, request: Request, tenant: str) -> Response:
        query = s.AuditEventSearchInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        events = selectors.audit_event_search(tenant=self.tenant, **query.validated_data)
        page = self.paginate_queryset(events)
        # The stubs type a plain Serializer's instance as one object, even with many=True.
        out = s.AuditEventOut(page, many=True)  # type: ignore[arg-type]
        return self.get_paginated_response(out.data)


class _ExportViewMixin(ActionPermissionMixin, viewsets.GenericViewSet[AuditExport]):
    """Shared by the tenant and platform export views."""

    audit_entity = "audit.export"
    serializer_class = s.AuditExportOut
    pagination_class = _ByCreated

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        # A client asking for application/zip must still get JSON errors, never a 406
        # before the view could say why.
        return super().perform_content_negotiation(request, force=True)

    def _list(self, exports: QuerySet[AuditExport]) -> Response:
        page = self.paginate_queryset(exports)
        return self.get_paginated_response(s.AuditExportOut(page, many=True).data)

    def _download(self, export: AuditExport) -> FileResponse:
        path: Path = audit_export_download(export=export, actor=self.actor())
        response = FileResponse(
            path.open("rb"),
            as_attachment=True,
            filename=f"cacheplane-audit-export-{export.pk}.zip",
            content_type="application/zip",
        )
        response["Cache-Control"] = "no-store"
        response["X-Content-SHA256"] = export.file_sha256
        return response


def _request(data: dict[str, Any]) -> ExportRequest:
    return ExportRequest(
        format=data["format"],
        since=data.get("since"),
        until=data.get("until"),
        actor=data.get("actor"),
        action=data.get("action"),
        outcome=data.get("outcome"),
    )


@extend_schema(tags=["audit"])
class TenantAuditExportViewSet(
    _ExportViewMixin, TenantScopedMixin, viewsets.GenericViewSet[AuditExport]
):
    """Exports of the tenant's audit chain: requested, processed in the background,
    downloaded as a signed bundle by any holder of ``audit.export`` at the tenant."""

    action_permissions = {
        "list": "audit.export",
        "create": "audit.export",
        "retrieve": "audit.export",
        "download": "audit.export",
    }

    def list(self, request: Request, tenant: str) -> Response:
        return self._list(selectors.audit_export_list(tenant=self.tenant))

    @extend_schema(
        request=s.AuditExportCreateInput,
        responses={201: s.AuditExportOut},
        parameters=[IDEMPOTENCY_KEY],
    )
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.AuditExportCreateInput, request.data)
        export = audit_export_create(
            tenant=self.tenant,
            actor=self.actor(),
            request=_request(data),
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        return Response(s.AuditExportOut(export).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: s.AuditExportDetailOut})
    def retrieve(self, request: Request, tenant: str, pk: str) -> Response:
        export = selectors.audit_export_get(tenant=self.tenant, export_id=pk)
        return Response(s.AuditExportDetailOut(export).data)

    @extend_schema(responses=DOWNLOAD_RESPONSES)
    @action(detail=True, methods=["get"])
    def download(self, request: Request, tenant: str, pk: str) -> FileResponse:
        return self._download(selectors.audit_export_get(tenant=self.tenant, export_id=pk))


@extend_schema(tags=["platform"])
class PlatformAuditExportViewSet(
    _ExportViewMixin, PlatformMixin, viewsets.GenericViewSet[AuditExport]
):
    """Platform exports: every chain (tenants and platform), or one tenant's."""

    action_permissions = {
        "list": "audit.export_platform",
        "create": "audit.export_platform",
        "retrieve": "audit.export_platform",
        "download": "audit.export_platform",
    }

    def list(self, request: Request) -> Response:
        return self._list(selectors.audit_export_list_platform())

    @extend_schema(
        request=s.PlatformAuditExportCreateInput,
        responses={201: s.AuditExportOut},
        parameters=[IDEMPOTENCY_KEY],
    )
    def create(self, request: Request) -> Response:
        data = validated(s.PlatformAuditExportCreateInput, request.data)
        filter_tenant = None
        if data.get("tenant"):
            filter_tenant = Tenant.objects.filter(slug=data["tenant"]).first()
            if filter_tenant is None:
                raise UnknownTenant(f"Unknown tenant {data['tenant']!r}.")
        export = audit_export_create(
            tenant=None,
            actor=self.actor(),
            request=_request(data),
            filter_tenant=filter_tenant,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        return Response(s.AuditExportOut(export).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: s.AuditExportDetailOut})
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(
            s.AuditExportDetailOut(selectors.audit_export_get_platform(export_id=pk)).data
        )

    @extend_schema(responses=DOWNLOAD_RESPONSES)
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str) -> FileResponse:
        return self._download(selectors.audit_export_get_platform(export_id=pk))


@extend_schema(tags=["audit"], auth=[], responses={200: s.SigningKeySetOut})
class AuditSigningKeyView(APIView):
    """The public keys that verify audit exports and digests (active and retired)."""

    permission_classes = [AllowAny]
    authentication_classes = []

    def get(self, request: Request) -> Response:
        return Response(s.SigningKeySetOut({"keys": selectors.audit_signing_key_list()}).data)
