"""Read-only operator views of the audit log, exports, digests and signing keys."""

from django.contrib import admin

from audit.models import AuditDigest, AuditEvent, AuditExport, AuditSigningKey
from controlplane.readonly_admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("occurred_at", "chain", "seq", "action", "outcome", "actor_name", "target_id")
    list_filter = ("outcome", "auth_method")
    search_fields = ("action", "actor_name", "target_id", "request_id")


@admin.register(AuditExport)
class AuditExportAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "tenant", "format", "status", "records", "requested_by_name")
    list_filter = ("status", "format")
    exclude = ("manifest",)


@admin.register(AuditDigest)
class AuditDigestAdmin(ReadOnlyAdmin):
    list_display = ("hour", "chain", "number", "head_seq", "key_id")


@admin.register(AuditSigningKey)
class AuditSigningKeyAdmin(ReadOnlyAdmin):
    list_display = ("kid", "fingerprint", "created_at", "retired_at")
