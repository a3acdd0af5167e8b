"""IAM API: thin adapters that validate input, call one service or selector, serialize."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.pagination import DefaultCursorPagination
from controlplane.api.tenancy import MEMBER, PlatformMixin, TenantScopedMixin
from controlplane.api.validation import validated
from controlplane.errors import NotFound
from tenants import selectors
from tenants.api import serializers as s
from tenants.errors import UnknownPrincipal
from tenants.models import ApiKey, Principal, Role, Tenant, TenantState
from tenants.services import iam, keys
from tenants.services import tenants as tenant_services


class _ByDateJoined(DefaultCursorPagination):
    page_size = 50
    max_page_size = 500
    page_size_query_param = "page_size"
    ordering = "-date_joined"


class _ByName(DefaultCursorPagination):
    page_size = 100
    max_page_size = 500
    page_size_query_param = "page_size"
    ordering = "name"


class _BySlug(_ByName):
    ordering = "slug"


# --- Platform ---------------------------------------------------------------------------


@extend_schema(tags=["platform"])
class PlatformTenantViewSet(PlatformMixin, viewsets.GenericViewSet[Tenant]):
    """Tenants as seen by platform operators."""

    audit_entity = "tenants.tenant"
    action_permissions = {
        "list": "tenants.list",
        "retrieve": "tenants.list",
        "create": "tenants.manage",
        "partial_update": "tenants.manage",
        "suspend": "tenants.manage",
        "resume": "tenants.manage",
    }
    lookup_field = "slug"
    lookup_url_kwarg = "slug"
    lookup_value_converter = "slug"
    serializer_class = s.TenantOut
    pagination_class = _BySlug

    def get_queryset(self) -> QuerySet[Tenant]:
        return selectors.tenant_list_all_tenants()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.TenantOut(page, many=True).data)

    def retrieve(self, request: Request, slug: str) -> Response:
        return Response(s.TenantOut(self.get_object()).data)

    @extend_schema(request=s.TenantCreateInput, responses={201: s.TenantOut})
    def create(self, request: Request) -> Response:
        data = validated(s.TenantCreateInput, request.data)
        admin = None
        if data.get("admin"):
            admin = Principal.objects.filter(pk=data["admin"], is_active=True).first()
            if admin is None:
                raise UnknownPrincipal(f"Unknown principal {data['admin']}.")
        tenant = tenant_services.tenant_create(
            actor=self.actor(), slug=data["slug"], display_name=data["display_name"], admin=admin
        )
        return Response(s.TenantOut(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TenantUpdateInput, responses={200: s.TenantOut})
    def partial_update(self, request: Request, slug: str) -> Response:
        data = validated(s.TenantUpdateInput, request.data)
        tenant = tenant_services.tenant_update(
            actor=self.actor(), tenant=self.get_object(), display_name=data["display_name"]
        )
        return Response(s.TenantOut(tenant).data)

    @extend_schema(request=s.TenantStateInput, responses={200: s.TenantOut})
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, slug: str) -> Response:
        return self._set_state(request, TenantState.SUSPENDED)

    @extend_schema(request=s.TenantStateInput, responses={200: s.TenantOut})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, slug: str) -> Response:
        return self._set_state(request, TenantState.ACTIVE)

    def _set_state(self, request: Request, state: str) -> Response:
        data = validated(s.TenantStateInput, request.data)
        tenant = tenant_services.tenant_set_state(
            actor=self.actor(),
            tenant=self.get_object(),
            state=state,
            reason=data.get("reason", ""),
        )
        return Response(s.TenantOut(tenant).data)


@extend_schema(tags=["platform"])
class PlatformPrincipalViewSet(PlatformMixin, viewsets.GenericViewSet[Principal]):
    """Human principals (platform identities, bound to tenants through policies)."""

    audit_entity = "tenants.principal"
    action_permissions = {"list": "tenants.list", "create": "tenants.manage"}
    serializer_class = s.PrincipalOut
    pagination_class = _ByDateJoined

    def get_queryset(self) -> QuerySet[Principal]:
        return selectors.principal_list_humans_all_tenants()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.PrincipalOut(page, many=True).data)

    @extend_schema(request=s.HumanCreateInput, responses={201: s.PrincipalOut})
    def create(self, request: Request) -> Response:
        data = validated(s.HumanCreateInput, request.data)
        principal = tenant_services.human_principal_create(
            actor=self.actor(),
            username=data["username"],
            password=data.get("password"),
            email=data.get("email", ""),
        )
        return Response(s.PrincipalOut(principal).data, status=status.HTTP_201_CREATED)


# --- Tenant -----------------------------------------------------------------------------


@extend_schema(tags=["tenants"])
class TenantSelfViewSet(TenantScopedMixin, viewsets.GenericViewSet[Tenant]):
    """The tenant itself, as its members see it."""

    audit_entity = "tenants.tenant"
    action_permissions = {"retrieve": MEMBER, "rotate_cache_salt": "salt.rotate"}
    serializer_class = s.TenantOut

    def retrieve(self, request: Request, tenant: str) -> Response:
        return Response(s.TenantOut(self.tenant).data)

    @extend_schema(request=None, responses={200: s.TenantOut})
    @action(detail=False, methods=["post"], url_path="cache-salt/rotate")
    def rotate_cache_salt(self, request: Request, tenant: str) -> Response:
        updated = tenant_services.tenant_rotate_cache_salt(actor=self.actor(), tenant=self.tenant)
        return Response(s.TenantOut(updated).data)


@extend_schema(tags=["iam"])
# No model behind it (a policy is one document over the bindings), hence Any.
class PolicyViewSet(TenantScopedMixin, viewsets.GenericViewSet[Any]):
    """The tenant's IAM policy, read and replaced as a whole under an etag."""

    audit_entity = "tenants.policy"
    action_permissions = {"retrieve": "iam.get", "replace": "iam.set", "test_permissions": MEMBER}
    serializer_class = s.PolicyOut

    @extend_schema(responses={200: s.PolicyOut})
    def retrieve(self, request: Request, tenant: str) -> Response:
        return Response(_policy_out(iam.policy_get(tenant=self.tenant)))

    @extend_schema(
        request=s.PolicySetInput,
        responses={200: s.PolicyOut, 409: OpenApiResponse(description="stale etag")},
    )
    def replace(self, request: Request, tenant: str) -> Response:
        data = validated(s.PolicySetInput, request.data)
        etag = request.headers.get("If-Match") or data["etag"]
        specs = [
            iam.BindingSpec(
                role=b["role"], principal_id=str(b["principal"]), expires_at=b.get("expires_at")
            )
            for b in data["bindings"]
        ]
        policy = iam.policy_set(actor=self.actor(), tenant=self.tenant, etag=etag, bindings=specs)
        return Response(_policy_out(policy))

    @extend_schema(request=s.PermissionsTestInput, responses={200: s.PermissionsTestOut})
    def test_permissions(self, request: Request, tenant: str) -> Response:
        data = validated(s.PermissionsTestInput, request.data)
        held = iam.permissions_test(
            actor=self.actor(), tenant=self.tenant, permissions=data["permissions"]
        )
        return Response({"permissions": held})


def _policy_out(policy: iam.Policy) -> dict[str, Any]:
    return s.PolicyOut(
        {"etag": policy.etag, "version": policy.version, "bindings": policy.bindings}
    ).data


@extend_schema(tags=["iam"])
class RoleViewSet(TenantScopedMixin, viewsets.GenericViewSet[Role]):
    """Roles bindable at this tenant; custom roles can be added."""

    audit_entity = "tenants.role"
    action_permissions = {"list": "iam.get", "create": "iam.set"}
    serializer_class = s.RoleOut
    pagination_class = _ByName

    def get_queryset(self) -> QuerySet[Role]:
        return selectors.role_list(tenant=self.tenant)

    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.RoleOut(page, many=True).data)

    @extend_schema(request=s.RoleCreateInput, responses={201: s.RoleOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.RoleCreateInput, request.data)
        role = iam.role_create(
            actor=self.actor(),
            tenant=self.tenant,
            name=data["name"],
            title=data["title"],
            permissions=data["permissions"],
            description=data.get("description", ""),
        )
        return Response(s.RoleOut(role).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["iam"])
class ServiceAccountViewSet(TenantScopedMixin, viewsets.GenericViewSet[Principal]):
    """Service accounts of this tenant (API keys only)."""

    audit_entity = "tenants.service_account"
    action_permissions = {"list": "iam.get", "create": "iam.set"}
    serializer_class = s.PrincipalOut
    pagination_class = _ByDateJoined

    def get_queryset(self) -> QuerySet[Principal]:
        return selectors.service_account_list(tenant=self.tenant)

    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.PrincipalOut(page, many=True).data)

    @extend_schema(request=s.ServiceAccountCreateInput, responses={201: s.PrincipalOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.ServiceAccountCreateInput, request.data)
        principal = iam.service_account_create(
            actor=self.actor(),
            tenant=self.tenant,
            name=data["name"],
            description=data.get("description", ""),
        )
        return Response(s.PrincipalOut(principal).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["iam"])
class ApiKeyViewSet(TenantScopedMixin, viewsets.GenericViewSet[ApiKey]):
    """API keys of this tenant: listed without secrets, created once, revoked."""

    audit_entity = "tenants.api_key"
    action_permissions = {"list": "iam.get", "create": "keys.create", "revoke": "keys.revoke"}
    serializer_class = s.ApiKeyOut

    def get_queryset(self) -> QuerySet[ApiKey]:
        return selectors.api_key_list(tenant=self.tenant)

    def list(self, request: Request, tenant: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.ApiKeyOut(page, many=True).data)

    @extend_schema(request=s.ApiKeyCreateInput, responses={201: s.ApiKeyIssuedOut})
    def create(self, request: Request, tenant: str) -> Response:
        data = validated(s.ApiKeyCreateInput, request.data)
        holder = None
        if data.get("principal"):
            holder = (
                selectors.service_account_list(tenant=self.tenant)
                .filter(pk=data["principal"])
                .first()
            )
            if holder is None:
                raise UnknownPrincipal(f"Unknown principal {data['principal']}.")
        issued = keys.api_key_create(
            actor=self.actor(),
            tenant=self.tenant,
            name=data["name"],
            principal=holder,
            expires_at=data.get("expires_at"),
        )
        body = dict(s.ApiKeyOut(issued.key).data)
        body["key"] = issued.plaintext
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(request=None, responses={200: s.ApiKeyOut})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, tenant: str, pk: str) -> Response:
        key = keys.api_key_revoke(actor=self.actor(), tenant=self.tenant, key_id=_uuid(pk))
        return Response(s.ApiKeyOut(key).data)


def _uuid(value: str) -> str:
    import uuid

    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound("No such object.") from None
