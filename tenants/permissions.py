"""The permission catalogue and the predefined roles.

Permissions are code, not data: a typo in a role definition fails at import, and the
API rejects any permission not listed here. Tenant permissions hold at one tenant (or at
every tenant when bound at platform scope); platform permissions hold only at platform
scope.
"""

from __future__ import annotations

from dataclasses import dataclass

TENANT_PERMISSIONS: dict[str, str] = {
    "caches.create": "Create cache objects",
    "caches.get": "Read a cache object",
    "caches.list": "List cache objects",
    "caches.update": "Extend TTLs and change cache policies",
    "caches.delete": "Evict cache objects",
    "inference.invoke": "Call models through the gateway",
    "usage.get": "Read usage and spend",
    "budgets.get": "Read budgets and alerts",
    "budgets.update": "Create and change budgets",
    "audit.export": "Export the tenant's audit log",
    "iam.get": "Read the tenant's IAM policy, roles, service accounts and keys",
    "iam.set": "Replace the IAM policy, create roles and service accounts",
    "keys.create": "Create API keys",
    "keys.revoke": "Revoke API keys",
    "salt.rotate": "Rotate the tenant's cache salt (invalidates its vLLM prefix caches)",
    "provider_credentials.get": "List the tenant's hosted-provider keys (fingerprints only)",
    "provider_credentials.set": "Set, rotate and delete provider keys; switch the cache autopilot",
}

PLATFORM_PERMISSIONS: dict[str, str] = {
    "tenants.manage": "Create, change, suspend and resume tenants; create human principals",
    "tenants.list": "List and read every tenant",
    "workers.manage": "Register and change workers and worker pools",
    "prices.manage": "Edit the price book",
    "audit.export_platform": "Export the platform audit log and any tenant's",
}

ALL_PERMISSIONS = frozenset(TENANT_PERMISSIONS) | frozenset(PLATFORM_PERMISSIONS)


@dataclass(frozen=True)
class RoleDefinition:
    """A predefined role: seeded into the database by migration, never editable."""

    name: str
    title: str
    scope: str  # "tenant" or "platform"
    permissions: frozenset[str]


def _role(name: str, title: str, scope: str, permissions: set[str]) -> RoleDefinition:
    unknown = permissions - ALL_PERMISSIONS
    if unknown:
        raise ValueError(f"role {name} names unknown permissions {sorted(unknown)}")
    return RoleDefinition(name, title, scope, frozenset(permissions))


_READ = {
    "caches.get",
    "caches.list",
    "usage.get",
    "budgets.get",
    "iam.get",
    # Provider, fingerprint, times and the autopilot switch: never the key itself.
    "provider_credentials.get",
}

PREDEFINED_ROLES: tuple[RoleDefinition, ...] = (
    _role("tenant.viewer", "Tenant viewer", "tenant", _READ),
    _role(
        "tenant.developer",
        "Developer",
        "tenant",
        {"inference.invoke", "caches.get", "caches.list"},
    ),
    _role(
        "tenant.cacheAdmin",
        "Cache admin",
        "tenant",
        {
            "caches.create",
            "caches.get",
            "caches.list",
            "caches.update",
            "caches.delete",
            "inference.invoke",
        },
    ),
    _role(
        "tenant.billingAdmin",
        "Billing admin",
        "tenant",
        {"usage.get", "budgets.get", "budgets.update"},
    ),
    _role("tenant.auditor", "Auditor", "tenant", {"audit.export", "iam.get", "usage.get"}),
    _role("tenant.admin", "Tenant admin", "tenant", set(TENANT_PERMISSIONS)),
    _role(
        "platform.admin",
        "Platform admin",
        "platform",
        set(TENANT_PERMISSIONS) | set(PLATFORM_PERMISSIONS),
    ),
    _role(
        "platform.auditor",
        "Platform auditor",
        "platform",
        _READ | {"audit.export", "audit.export_platform", "tenants.list"},
    ),
)

TENANT_ADMIN_ROLE = "tenant.admin"
PLATFORM_ADMIN_ROLE = "platform.admin"
