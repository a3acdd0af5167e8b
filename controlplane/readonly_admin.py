"""The Django admin base for Cacheplane's models: read-only.

Every change to these objects must be audited in the same transaction, which the services
do and the generic admin forms would not; operators change them through the API, the
console or the CLI.
"""

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]  # the base of every model's admin, hence Any
else:
    _ModelAdmin = admin.ModelAdmin  # not subscriptable at runtime


class ReadOnlyAdmin(_ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        # all_tenants: the Django admin is a platform tool (superusers only) that lists
        # every tenant's rows; tenant-owned managers refuse unscoped queries otherwise.
        if hasattr(queryset, "all_tenants"):
            queryset = queryset.all_tenants()
        return queryset
