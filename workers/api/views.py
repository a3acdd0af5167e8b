"""Platform routes for the worker registry (platform admins: ``workers.manage``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.tenancy import PlatformMixin
from controlplane.errors import NotFound
from workers import services
from workers.api.serializers import WorkerOut, WorkerRegisterInput
from workers.models import Worker


@extend_schema(tags=["workers"])
class PlatformWorkerViewSet(PlatformMixin, viewsets.GenericViewSet[Worker]):
    """Register (create or update by name) and read workers; the API key is never returned."""

    audit_entity = "workers.worker"
    action_permissions = {"register": "workers.manage", "retrieve": "tenants.list"}
    serializer_class = WorkerOut
    lookup_field = "name"

    def get_queryset(self) -> Any:
        return Worker.objects.all()  # workers are shared infrastructure, not tenant data

    @extend_schema(request=WorkerRegisterInput, responses={201: WorkerOut})
    def register(self, request: Request) -> Response:
        data = WorkerRegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        worker = services.worker_register(
            actor=self.actor(), api_key=fields.pop("api_key", None), **fields
        )
        return Response(WorkerOut(worker).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: WorkerOut})
    def retrieve(self, request: Request, name: str) -> Response:
        worker = Worker.objects.filter(name=name).first()
        if worker is None:
            raise NotFound("No such worker.")
        return Response(WorkerOut(worker).data)
