"""Writes (and the authorization decision) for tenants and IAM; see the topic modules."""

from tenants.services.authorization import (
    authorize,
    principal_has_any_binding,
    principal_permissions,
)
from tenants.services.bootstrap import demo_tenants_ensure, platform_admin_ensure

__all__ = [
    "authorize",
    "demo_tenants_ensure",
    "platform_admin_ensure",
    "principal_has_any_binding",
    "principal_permissions",
]
