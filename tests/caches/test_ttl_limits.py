"""TTLs the provider would refuse are refused at the API, and nothing is written."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from caches.models import CacheObject, CacheOperation
from caches.services.execution import operation_execute
from tests.caches.conftest import big_content

pytestmark = pytest.mark.django_db


def _url(tenant, suffix: str = "") -> str:
    return f"/api/v1/tenants/{tenant.slug}/caches{suffix}"


def _create_body(ttl_seconds: int) -> dict:
    return {
        "name": "contracts",
        "provider": "vertex",
        "model": "gemini-2.5-flash",
        "content": big_content(),
        "ttl_seconds": ttl_seconds,
    }


@pytest.mark.parametrize("ttl", [1, 30, 59])
def test_a_vertex_cache_under_sixty_seconds_is_refused_before_anything_is_written(
    api, tenant_a, admin_a, ttl
) -> None:
    api.force_login(admin_a)
    events = AuditEvent.objects.count()
    response = api.post(_url(tenant_a), _create_body(ttl), format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "ttl_below_provider_minimum"
    assert error["details"] == {"minimum": 60, "given": ttl, "provider": "vertex"}
    assert not CacheObject.objects.all_tenants().exists()
    assert not CacheOperation.objects.all_tenants().exists()
    assert AuditEvent.objects.count() == events


def test_a_vertex_cache_of_exactly_sixty_seconds_is_accepted(
    api, vertex, tenant_a, admin_a
) -> None:
    api.force_login(admin_a)
    response = api.post(_url(tenant_a), _create_body(60), format="json")
    assert response.status_code == 202, response.json()


def test_extending_or_re_policing_a_vertex_cache_under_the_minimum_is_refused(
    api, vertex, tenant_a, admin_a
) -> None:
    api.force_login(admin_a)
    op = api.post(_url(tenant_a), _create_body(600), format="json").json()
    operation_execute(operation_id=op["id"])
    operations, events = CacheOperation.objects.all_tenants().count(), AuditEvent.objects.count()
    extend = api.post(_url(tenant_a, f"/{op['cache']}/extend"), {"ttl_seconds": 10}, format="json")
    policy = api.post(
        _url(tenant_a, f"/{op['cache']}/policy"),
        {"ttl_policy": "sliding", "ttl_seconds": 59},
        format="json",
    )
    for response in (extend, policy):
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["code"] == "ttl_below_provider_minimum"
    assert CacheOperation.objects.all_tenants().count() == operations
    assert AuditEvent.objects.count() == events
    cache = CacheObject.objects.all_tenants().get(pk=op["cache"])
    assert (cache.ttl_seconds, cache.ttl_policy) == (600, "fixed")
