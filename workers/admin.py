"""Read-only operator pages for workers."""

from django.contrib import admin

from controlplane.readonly_admin import ReadOnlyAdmin
from workers.models import Worker


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("name", "pool", "model", "state", "base_url", "last_seen_at")
    list_filter = ("pool", "state", "engine")
