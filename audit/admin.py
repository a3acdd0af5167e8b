"""Read-only operator views of the audit log, exports, digests and signing keys."""

from django.contrib import admin

from audit.models import AuditDigest, AuditEvent, AuditExport, AuditSigningKey


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Changes go through the audited services, never through the admin."""

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(_ReadOnlyAdmin):
    list_display = ("occurred_at", "chain", "seq", "action", "outcome", "actor_name", "target_id")
    list_filter = ("outcome", "auth_method")
    search_fields = ("action", "actor_name", "target_id", "request_id")


@admin.register(AuditExport)
class AuditExportAdmin(_ReadOnlyAdmin):
    list_display = ("created_at", "tenant", "format", "status", "records", "requested_by_name")
    list_filter = ("status", "format")
    exclude = ("manifest",)


@admin.register(AuditDigest)
class AuditDigestAdmin(_ReadOnlyAdmin):
    list_display = ("hour", "chain", "number", "head_seq", "key_id")


@admin.register(AuditSigningKey)
class AuditSigningKeyAdmin(_ReadOnlyAdmin):
    list_display = ("kid", "fingerprint", "created_at", "retired_at")
