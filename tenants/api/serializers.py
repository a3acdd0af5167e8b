"""Input and output shapes of the IAM API (inputs and outputs are separate classes)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.display_text import display_text_validator
from tenants.models import SLUG_VALIDATOR, ApiKey, Principal, Role, RoleBinding, Tenant


class TenantOut(serializers.ModelSerializer[Tenant]):
    class Meta:
        model = Tenant
        fields = [
            "id",
            "slug",
            "display_name",
            "state",
            "cache_salt_version",
            "created_at",
            "updated_at",
            "suspended_at",
        ]
        read_only_fields = fields


class TenantCreateInput(serializers.Serializer[None]):
    slug = serializers.CharField(max_length=40, validators=[SLUG_VALIDATOR])
    display_name = serializers.CharField(max_length=200, validators=[display_text_validator])
    admin = serializers.UUIDField(
        required=False, allow_null=True, help_text="Human principal bound as tenant admin."
    )


class TenantUpdateInput(serializers.Serializer[None]):
    display_name = serializers.CharField(max_length=200, validators=[display_text_validator])


class TenantStateInput(serializers.Serializer[None]):
    reason = serializers.CharField(
        max_length=500, required=False, allow_blank=True, validators=[display_text_validator]
    )


class PrincipalOut(serializers.ModelSerializer[Principal]):
    class Meta:
        model = Principal
        fields = ["id", "username", "kind", "tenant", "description", "is_active", "date_joined"]
        read_only_fields = fields


class HumanCreateInput(serializers.Serializer[None]):
    username = serializers.RegexField(r"^[A-Za-z0-9@.+_-]{3,150}$", max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True)
    password = serializers.CharField(
        min_length=12,
        max_length=200,
        write_only=True,
        required=False,
        help_text="Omit for a principal that logs in only after a password is set.",
    )


class ServiceAccountCreateInput(serializers.Serializer[None]):
    name = serializers.CharField(max_length=40, validators=[display_text_validator])
    description = serializers.CharField(
        max_length=500, required=False, allow_blank=True, validators=[display_text_validator]
    )


class RoleOut(serializers.ModelSerializer[Role]):
    custom = serializers.SerializerMethodField()

    class Meta:
        model = Role
        fields = ["id", "name", "title", "description", "scope", "permissions", "custom"]
        read_only_fields = fields

    def get_custom(self, role: Role) -> bool:
        return role.tenant_id is not None


class RoleCreateInput(serializers.Serializer[None]):
    name = serializers.RegexField(r"^[a-zA-Z][a-zA-Z0-9_.-]{2,63}$", max_length=64)
    title = serializers.CharField(max_length=200, validators=[display_text_validator])
    description = serializers.CharField(
        max_length=500, required=False, allow_blank=True, validators=[display_text_validator]
    )
    permissions = serializers.ListField(
        child=serializers.CharField(max_length=64), min_length=1, max_length=64
    )


class BindingOut(serializers.ModelSerializer[RoleBinding]):
    role = serializers.CharField(source="role.name")
    principal = serializers.UUIDField(source="principal_id")
    principal_name = serializers.CharField(source="principal.username")

    class Meta:
        model = RoleBinding
        fields = ["role", "principal", "principal_name", "expires_at"]
        read_only_fields = fields


class PolicyOut(serializers.Serializer[dict[str, Any]]):
    etag = serializers.CharField()
    version = serializers.IntegerField()
    bindings = BindingOut(many=True)


class BindingInput(serializers.Serializer[None]):
    role = serializers.CharField(max_length=64)
    principal = serializers.UUIDField()
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class PolicySetInput(serializers.Serializer[None]):
    etag = serializers.CharField(max_length=100)
    # many=True makes a ListSerializer, which takes max_length; the stubs' __init__ lacks it.
    bindings = BindingInput(many=True, max_length=1000)  # type: ignore[call-arg]


class PermissionsTestInput(serializers.Serializer[None]):
    permissions = serializers.ListField(
        child=serializers.CharField(max_length=64), min_length=1, max_length=100
    )


class PermissionsTestOut(serializers.Serializer[dict[str, Any]]):
    permissions = serializers.ListField(child=serializers.CharField())


class ApiKeyOut(serializers.ModelSerializer[ApiKey]):
    principal_name = serializers.CharField(source="principal.username")

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "principal",
            "principal_name",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]
        read_only_fields = fields


class ApiKeyCreateInput(serializers.Serializer[None]):
    name = serializers.CharField(max_length=100, validators=[display_text_validator])
    principal = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="A service account of this tenant; omit for a key of your own.",
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ApiKeyIssuedOut(ApiKeyOut):
    key = serializers.CharField(help_text="The secret, shown only in this response.")

    class Meta(ApiKeyOut.Meta):
        fields = [*ApiKeyOut.Meta.fields, "key"]
        read_only_fields = fields
