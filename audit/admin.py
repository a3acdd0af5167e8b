"""Read-only operator view of the audit log."""

from django.contrib import admin

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("occurred_at", "chain", "seq", "action", "outcome", "actor_name", "target_id")
    list_filter = ("outcome", "auth_method")
    search_fields = ("action", "actor_name", "target_id", "request_id")

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False
