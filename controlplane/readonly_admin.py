"""The Django admin base for Cacheplane's models: read-only.

Every change to these objects must be audited in the same transaction, which the services
do and the generic admin forms would not; operators change them through the API, the
console or the CLI.
"""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        # all_tenants: the Django admin is a platform tool (superusers only) that lists
        # every tenant's rows; tenant-owned managers refuse unscoped queries otherwise.
        if hasattr(queryset, "all_tenants"):
            queryset = queryset.all_tenants()
        return queryset
