"""Fail-closed tenancy in the ORM: an unscoped query on a tenant-owned model raises."""

from __future__ import annotations

import pytest
from django.apps import apps

from billing.models import Budget, BudgetPeriod
from caches.models import CacheObject, CacheOperation
from tenants.models import ApiKey
from tenants.scoping import TenantScopeRequired, is_tenant_owned

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache_a(tenant_a):
    return CacheObject.objects.create(
        tenant=tenant_a,
        name="a",
        provider="vllm",
        model="m",
        content={},
        content_digest="a" * 64,
        ttl_seconds=600,
    )


@pytest.mark.parametrize(
    "run",
    [
        lambda: list(CacheObject.objects.all()),
        lambda: CacheObject.objects.filter(name="a").first(),
        lambda: CacheObject.objects.count(),
        lambda: CacheObject.objects.exists(),
        lambda: CacheObject.objects.filter(state="active").update(name="x"),
        lambda: CacheObject.objects.filter(name="zzz").delete(),
        lambda: list(CacheObject.objects.values_list("pk", flat=True)),
        lambda: CacheObject.objects.get(name="a"),
        lambda: list(ApiKey.objects.iterator()),
        lambda: Budget.objects.in_bulk([]),
    ],
)
def test_an_unscoped_query_raises_and_names_the_model_and_the_fix(cache_a, run) -> None:
    with pytest.raises(TenantScopeRequired) as caught:
        run()
    message = str(caught.value)
    assert caught.value.model.__name__ in message
    assert "filter(tenant=" in message and "all_tenants()" in message


def test_an_unscoped_update_writes_nothing(cache_a) -> None:
    with pytest.raises(TenantScopeRequired):
        CacheObject.objects.filter(name="a").update(name="changed")
    cache_a.refresh_from_db()
    assert cache_a.name == "a"


def test_scoped_queries_run(tenant_a, tenant_b, cache_a) -> None:
    assert list(CacheObject.objects.filter(tenant=tenant_a)) == [cache_a]
    assert CacheObject.objects.filter(tenant_id=tenant_b.pk).count() == 0
    assert CacheObject.objects.filter(tenant__slug=tenant_a.slug).exists()
    assert list(tenant_a.caches.all()) == [cache_a]  # a tenant's related manager
    assert CacheOperation.objects.filter(cache=cache_a).count() == 0  # a tenant-owned parent
    assert CacheOperation.objects.filter(cache__tenant=tenant_a).count() == 0
    assert list(cache_a.operations.all()) == []
    assert BudgetPeriod.objects.filter(budget__tenant=tenant_a).count() == 0
    assert CacheObject.objects.none().count() == 0


def test_the_escape_hatch_spans_tenants_and_survives_chaining(tenant_a, cache_a) -> None:
    # all_tenants: the test reads across tenants on purpose
    rows = CacheObject.objects.all_tenants().filter(name="a").order_by("pk").select_related()
    assert list(rows) == [cache_a]


def test_every_model_with_a_required_tenant_fk_is_fail_closed() -> None:
    """A new tenant-owned model cannot forget the manager (audit models are scoped by
    their chain and handled by the audit app; roles and bindings have platform rows)."""
    exempt = {
        "audit.auditevent",
        "audit.auditdigest",
        "audit.auditexport",
        # Platform configuration, read across tenants at every SSO login by design
        # (identity.services.mappings); written only by platform admins.
        "identity.groupmapping",
        "identity.mappedbinding",
    }
    missing = []
    for model in apps.get_models():
        label = model._meta.label_lower
        tenant = next((f for f in model._meta.fields if f.name == "tenant"), None)
        if tenant is None or tenant.null or label in exempt:
            continue
        if not is_tenant_owned(model):
            missing.append(label)
    assert missing == []
