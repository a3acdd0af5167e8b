"""Platform routes for the IdP group → role mapping (platform admins only)."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.tenancy import PlatformMixin
from controlplane.api.validation import validated
from controlplane.errors import NotFound
from identity.api import serializers as s
from identity.models import GroupMapping, Invitation, ScimToken
from identity.services import invitations, mappings, people, scim, sessions
from tenants.errors import TenantNotFound
from tenants.models import Principal, PrincipalKind, Tenant


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
    lookup_value_converter = "uuid"

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


def _person(pk: str) -> Principal:
    person = Principal.objects.filter(pk=pk, kind=PrincipalKind.HUMAN).first()
    if person is None:
        raise NotFound("No such person.")
    return person


@extend_schema(tags=["platform"])
class PersonLifecycleViewSet(PlatformMixin, viewsets.GenericViewSet[Principal]):
    """Disable, re-enable, sign out everywhere or remove a person (platform admins)."""

    audit_entity = "identity.principal"
    action_permissions = {
        "disable": "tenants.manage",
        "enable": "tenants.manage",
        "sign_out": "tenants.manage",
        "remove": "tenants.manage",
    }
    serializer_class = s.PersonOut
    lookup_value_converter = "uuid"

    def _answer(self, person: Principal) -> Response:
        return Response(s.PersonOut(person).data)

    @extend_schema(request=None, responses={200: s.PersonOut})
    @action(detail=True, methods=["post"])
    def disable(self, request: Request, pk: str) -> Response:
        return self._answer(
            people.person_set_active(actor=self.actor(), principal=_person(pk), active=False)
        )

    @extend_schema(request=None, responses={200: s.PersonOut})
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, pk: str) -> Response:
        return self._answer(
            people.person_set_active(actor=self.actor(), principal=_person(pk), active=True)
        )

    @extend_schema(request=None, responses={200: s.PersonOut})
    @action(detail=True, methods=["post"], url_path="sign-out")
    def sign_out(self, request: Request, pk: str) -> Response:
        person = _person(pk)
        people.person_sessions_end(actor=self.actor(), principal=person)
        return self._answer(person)

    @extend_schema(request=None, responses={200: s.PersonOut})
    @action(detail=True, methods=["post"])
    def remove(self, request: Request, pk: str) -> Response:
        return self._answer(people.person_remove(actor=self.actor(), principal=_person(pk)))


@extend_schema(tags=["platform"])
class InvitationViewSet(PlatformMixin, viewsets.GenericViewSet[Invitation]):
    """Invite a person by e-mail (a single-use, expiring link to choose a password, and
    optional roles); list and revoke pending invitations."""

    audit_entity = "identity.invitation"
    action_permissions = {
        "list": "tenants.list",
        "create": "tenants.manage",
        "revoke": "tenants.manage",
    }
    serializer_class = s.InvitationOut
    pagination_class = _ByCreated
    lookup_value_converter = "uuid"

    def get_queryset(self) -> QuerySet[Invitation]:
        return invitations.invitation_list_pending()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.InvitationOut(page, many=True).data)

    @extend_schema(request=s.InvitationInput, responses={201: s.InvitationOut})
    def create(self, request: Request) -> Response:
        data = validated(s.InvitationInput, request.data)
        invitation = invitations.invitation_create(
            actor=self.actor(),
            username=data["username"],
            email=data["email"],
            roles=[(g["tenant"], g["role"]) for g in data.get("roles") or []],
            set_password_url=request.build_absolute_uri("/reset/") + "{uid}/{token}/",
        )
        return Response(s.InvitationOut(invitation).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.InvitationOut})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        invitation = invitations.invitation_revoke(actor=self.actor(), invitation_id=pk)
        return Response(s.InvitationOut(invitation).data)


@extend_schema(tags=["platform"])
class PersonSessionViewSet(PlatformMixin, viewsets.GenericViewSet[Principal]):
    """A person's console sessions: list them, end one (sign out everywhere is
    ``POST .../sign-out``)."""

    audit_entity = "identity.principal.session"
    action_permissions = {"list": "tenants.list", "destroy": "tenants.manage"}
    serializer_class = s.SessionOut
    pagination_class = None
    lookup_url_kwarg = "session_id"  # the person's id is the route prefix's ``pk``

    @extend_schema(responses={200: s.SessionOut(many=True)})
    def list(self, request: Request, pk: str) -> Response:
        rows = sessions.person_session_list(
            principal=_person(pk), current_key=request.session.session_key
        )
        return Response([s.SessionOut(row.__dict__).data for row in rows])

    @extend_schema(responses={204: OpenApiResponse(description="Signed out.")})
    def destroy(self, request: Request, pk: str, session_id: str) -> Response:
        sessions.person_session_end(actor=self.actor(), principal=_person(pk), session=session_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["platform"])
class ScimTokenViewSet(PlatformMixin, viewsets.GenericViewSet[ScimToken]):
    """The bearer tokens an IdP's SCIM client uses (``/scim/v2/``); shown once."""

    audit_entity = "identity.scim_token"
    action_permissions = {
        "list": "tenants.list",
        "create": "tenants.manage",
        "destroy": "tenants.manage",
    }
    serializer_class = s.ScimTokenOut
    pagination_class = _ByCreated
    lookup_value_converter = "uuid"

    def get_queryset(self) -> QuerySet[ScimToken]:
        return ScimToken.objects.all()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.ScimTokenOut(page, many=True).data)

    @extend_schema(request=s.ScimTokenInput, responses={201: s.ScimTokenCreatedOut})
    def create(self, request: Request) -> Response:
        data = validated(s.ScimTokenInput, request.data)
        issued = scim.scim_token_create(actor=self.actor(), name=data["name"])
        out = {**s.ScimTokenOut(issued.token).data, "token": issued.plaintext}
        return Response(out, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: OpenApiResponse(description="Revoked.")})
    def destroy(self, request: Request, pk: str) -> Response:
        scim.scim_token_revoke(actor=self.actor(), token_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
