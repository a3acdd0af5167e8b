from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_roles(sender: AppConfig, **kwargs: Any) -> None:
    from tenants.services.bootstrap import predefined_roles_sync

    predefined_roles_sync()


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_sync_roles, sender=self)
        from tenants import signals  # noqa: F401 - connects login audit handlers
