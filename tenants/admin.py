"""Operator pages for tenants and principals (reads and safe edits only; IAM changes go
through the audited services)."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from tenants.models import Principal, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "display_name", "state", "cache_salt_version", "created_at")
    list_filter = ("state",)
    search_fields = ("slug", "display_name")
    readonly_fields = ("id", "slug", "state", "cache_salt_version", "created_at", "updated_at")


@admin.register(Principal)
class PrincipalAdmin(UserAdmin):
    list_display = ("username", "kind", "tenant", "is_staff", "is_active")
    list_filter = ("kind", "is_staff", "is_active")
    fieldsets = (
        *UserAdmin.fieldsets,
        ("Cacheplane", {"fields": ("kind", "tenant", "description")}),
    )
