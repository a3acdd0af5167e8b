"""Operator pages for tenants and IAM: read-only.

Every change to these objects must be audited in the same transaction, which the
services do and the generic admin forms would not; operators change them through the
API or the console.
"""

from django.contrib import admin

from controlplane.readonly_admin import ReadOnlyAdmin
from tenants.models import ApiKey, Principal, Role, RoleBinding, Tenant


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ("slug", "display_name", "state", "cache_salt_version", "created_at")
    list_filter = ("state",)
    search_fields = ("slug", "display_name")
    exclude = ("cache_salt_secret",)


@admin.register(Principal)
class PrincipalAdmin(ReadOnlyAdmin):
    list_display = ("username", "kind", "tenant", "is_staff", "is_active", "last_login")
    list_filter = ("kind", "is_staff", "is_active")
    search_fields = ("username", "email")
    exclude = ("password",)


@admin.register(Role)
class RoleAdmin(ReadOnlyAdmin):
    list_display = ("name", "title", "scope", "tenant", "is_predefined")
    list_filter = ("scope", "is_predefined")


@admin.register(RoleBinding)
class RoleBindingAdmin(ReadOnlyAdmin):
    list_display = ("principal", "role", "tenant", "expires_at", "created_at")
    list_select_related = ("principal", "role", "tenant")


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ("prefix", "name", "tenant", "principal", "created_at", "revoked_at")
    list_select_related = ("tenant", "principal")
    exclude = ("digest",)
