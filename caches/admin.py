"""Read-only operator pages (changes go through the audited services)."""

from django.contrib import admin

from caches.models import CacheObject, CacheOperation, ReconcileRun, TenantCacheSettings
from controlplane.readonly_admin import ReadOnlyAdmin


@admin.register(CacheObject)
class CacheObjectAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "provider", "model", "state", "expire_at", "hit_count")
    list_filter = ("provider", "state", "ttl_policy")
    search_fields = ("name", "content_digest", "remote_name")
    exclude = ("content",)


@admin.register(CacheOperation)
class CacheOperationAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "kind", "status", "attempts", "created_at", "finished_at")
    list_filter = ("kind", "status")


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = ("scope", "started_at", "checked", "expired", "adopted", "deleted_orphans")


@admin.register(TenantCacheSettings)
class TenantCacheSettingsAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "vertex_project", "vertex_location")
