"""Group mapping API shapes (input and output apart)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from identity.models import GroupMapping, Invitation, ScimToken
from tenants.models import Principal


class GroupMappingCreateInput(serializers.Serializer[None]):
    tenant = serializers.SlugField(max_length=40, help_text="The tenant's slug.")
    group = serializers.CharField(max_length=255, help_text="The group name the IdP asserts.")
    role = serializers.CharField(max_length=64, help_text="A tenant role, e.g. tenant.admin.")


class GroupMappingOut(serializers.ModelSerializer[GroupMapping]):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    role = serializers.CharField(source="role.name", read_only=True)

    class Meta:
        model = GroupMapping
        fields = ["id", "tenant", "group", "role", "created_at"]
        read_only_fields = fields


class PersonOut(serializers.ModelSerializer[Principal]):
    class Meta:
        model = Principal
        fields = ["id", "username", "is_active"]
        read_only_fields = fields


class RoleGrantInput(serializers.Serializer[None]):
    tenant = serializers.SlugField(max_length=40)
    role = serializers.CharField(max_length=64)


class InvitationInput(serializers.Serializer[None]):
    username = serializers.RegexField(r"^[A-Za-z0-9@.+_-]{3,150}$", max_length=150)
    email = serializers.EmailField()
    roles = RoleGrantInput(many=True, required=False, help_text="Granted at once.")


class InvitationOut(serializers.ModelSerializer[Invitation]):
    username = serializers.CharField(source="principal.username", read_only=True)
    principal = serializers.UUIDField(source="principal.pk", read_only=True)
    roles = serializers.ListField(child=serializers.ListField(child=serializers.CharField()))

    class Meta:
        model = Invitation
        fields = [
            "id",
            "principal",
            "username",
            "email",
            "roles",
            "created_at",
            "expires_at",
            "accepted_at",
            "revoked_at",
        ]
        read_only_fields = fields


class SessionOut(serializers.Serializer[dict[str, Any]]):
    session_id = serializers.CharField(help_text="Not the cookie: a digest that names it.")
    opened_at = serializers.CharField(allow_null=True)
    expires_at = serializers.DateTimeField()
    ip = serializers.CharField()
    user_agent = serializers.CharField()
    method = serializers.ChoiceField(choices=["password", "sso"])
    current = serializers.BooleanField()


class ScimTokenInput(serializers.Serializer[None]):
    name = serializers.CharField(max_length=100)


class ScimTokenOut(serializers.ModelSerializer[ScimToken]):
    class Meta:
        model = ScimToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class ScimTokenCreatedOut(ScimTokenOut):
    token = serializers.CharField(help_text="The secret, shown once.")

    class Meta(ScimTokenOut.Meta):
        fields = [*ScimTokenOut.Meta.fields, "token"]
        read_only_fields = fields
