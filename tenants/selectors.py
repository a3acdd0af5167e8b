"""Reads of tenants and IAM objects; every tenant-owned read takes the tenant."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from tenants.models import ApiKey, Principal, PrincipalKind, Role, RoleBinding, Tenant


def tenant_list_all_tenants() -> QuerySet[Tenant]:
    """Every tenant (platform views only: callers check tenants.list first)."""
    return Tenant.objects.all()


def tenant_list_visible(*, principal: Principal) -> QuerySet[Tenant]:
    """Tenants where the principal holds any unexpired binding (all for platform members)."""
    from django.utils import timezone

    live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    bindings = RoleBinding.objects.filter(live, principal=principal)
    if bindings.filter(tenant__isnull=True).exists():
        return Tenant.objects.all()
    if principal.is_service_account:
        if principal.tenant_id is None:
            return Tenant.objects.none()  # what filter(pk=None) matched: no tenant
        return Tenant.objects.filter(pk=principal.tenant_id)
    return Tenant.objects.filter(pk__in=bindings.values("tenant_id"))


def tenant_get_by_slug_all_tenants(*, slug: str) -> Tenant | None:
    """A tenant by slug, for platform routes that have already checked platform access."""
    return Tenant.objects.filter(slug=slug).first()


def role_list(*, tenant: Tenant) -> QuerySet[Role]:
    """Roles bindable at this tenant: predefined tenant roles and its custom roles."""
    return Role.objects.filter(Q(tenant__isnull=True, scope="tenant") | Q(tenant=tenant))


def service_account_list(*, tenant: Tenant) -> QuerySet[Principal]:
    return Principal.objects.filter(tenant=tenant, kind=PrincipalKind.SERVICE)


def principal_list_humans_all_tenants() -> QuerySet[Principal]:
    """Human principals are platform identities; listing them is a platform operation."""
    return Principal.objects.filter(kind=PrincipalKind.HUMAN)


def api_key_list(*, tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant).select_related("principal")
