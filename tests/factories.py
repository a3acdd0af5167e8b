"""factory_boy factories; children always stay inside their parent's tenant."""

from __future__ import annotations

import factory

from tenants.actor import Actor
from tenants.models import Principal, PrincipalKind, Role, RoleBinding, Tenant
from tenants.services.authorization import principal_permissions_forget


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n:04d}")
    display_name = factory.LazyAttribute(lambda o: o.slug.title())


class HumanFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Principal

    username = factory.Sequence(lambda n: f"user{n:04d}")
    kind = PrincipalKind.HUMAN
    password = factory.django.Password("correct-horse-battery")


class ServiceAccountFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Principal

    tenant = factory.SubFactory(TenantFactory)
    username = factory.LazyAttributeSequence(lambda o, n: f"sa.{o.tenant.slug}.bot{n}")
    kind = PrincipalKind.SERVICE


def bind(principal: Principal, role_name: str, tenant: Tenant | None, **kwargs) -> RoleBinding:
    """Grant a predefined (or the tenant's custom) role directly, bypassing the API."""
    role = Role.objects.filter(name=role_name, tenant__isnull=True).first() or Role.objects.get(
        name=role_name, tenant=tenant
    )
    binding = RoleBinding.objects.create(principal=principal, role=role, tenant=tenant, **kwargs)
    principal_permissions_forget(principal)
    return binding


def actor_for(principal: Principal | None) -> Actor:
    return Actor(principal=principal, auth_method="session", source_ip="127.0.0.1")
