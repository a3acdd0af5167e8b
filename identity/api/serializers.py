"""Group mapping API shapes (input and output apart)."""

from __future__ import annotations

from rest_framework import serializers

from identity.models import GroupMapping
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


class InvitationInput(serializers.Serializer[None]):
    username = serializers.RegexField(r"^[A-Za-z0-9@.+_-]{3,150}$", max_length=150)
    email = serializers.EmailField()
