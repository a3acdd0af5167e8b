"""``cacheplane demo``: the seed is complete and running it twice changes nothing."""

from __future__ import annotations

import pytest

from billing.models import Budget
from caches.models import CacheObject
from gateway.models import RateLimit
from tenants.models import ApiKey, Principal, RoleBinding, Tenant

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, ...]:
    return (
        Tenant.objects.count(),
        Principal.objects.count(),
        RoleBinding.objects.count(),
        ApiKey.objects.all_tenants().count(),
        Budget.objects.all_tenants().count(),
        CacheObject.objects.all_tenants().count(),
        RateLimit.objects.all_tenants().count(),
    )


def test_demo_seed_gives_each_demo_tenant_people_a_key_a_budget_and_a_cache(
    platform_admin, tmp_path
) -> None:
    from frontend.demo import demo_seed
    from tenants.services.keys import api_key_authenticate

    seed = demo_seed(data_dir=tmp_path, password="demo-password-123", worker_model=None)
    for slug in ("acme-legal", "globex-support"):
        tenant = Tenant.objects.get(slug=slug)
        assert RoleBinding.objects.filter(tenant=tenant, role__name="tenant.admin").exists()
        assert Budget.objects.all_tenants().filter(tenant=tenant).exists()
        assert RateLimit.objects.filter(tenant=tenant, api_key__isnull=True).exists()
        assert CacheObject.objects.all_tenants().filter(tenant=tenant, provider="vertex").exists()
        assert api_key_authenticate(seed.keys[slug]).tenant.pk == tenant.pk
    assert (tmp_path / "demo-keys.json").stat().st_mode & 0o077 == 0
    first = _counts()
    again = demo_seed(data_dir=tmp_path, password="demo-password-123", worker_model=None)
    assert _counts() == first  # run twice: nothing new
    assert again.keys == seed.keys


def test_a_demo_cache_that_failed_is_created_again(platform_admin, tmp_path) -> None:
    from caches.models import CacheState
    from frontend.demo import demo_caches_settle, demo_seed

    demo_seed(data_dir=tmp_path, password="demo-password-123", worker_model=None)
    caches = CacheObject.objects.all_tenants().filter(name="playbook-vertex")
    caches.update(state=CacheState.FAILED)  # as when the emulator was not up yet
    seen = demo_caches_settle(worker_model=None, timeout=0)
    assert seen["acme-legal/playbook-vertex"] == "failed"
    fresh = caches.filter(state=CacheState.PENDING)
    assert fresh.count() == 2  # one new creation per demo tenant, through the service
    assert demo_caches_settle(worker_model=None, timeout=0) == {
        "acme-legal/playbook-vertex": "pending",
        "globex-support/playbook-vertex": "pending",
    }  # pending: followed, not created a third time
    assert caches.count() == 4


def test_demo_traffic_goes_through_the_demo_caches_on_both_providers_with_a_plain_fallback():
    from frontend.demo import VERTEX_DEMO_MODEL, _demo_request

    shapes = [_demo_request(n, "acme-legal", "cacheplane/ref-tiny") for n in range(4)]
    assert [c["cache"] for c, _ in shapes] == ["playbook-vllm"] * 3 + ["playbook-vertex"]
    assert shapes[3][0]["model"] == VERTEX_DEMO_MODEL
    for cached, plain in shapes:
        # A cache carries the prefix (a system message beside a Vertex cache is refused);
        # the fallback sends the same prefix as a system message.
        assert [m["role"] for m in cached["messages"]] == ["user"]
        assert [m["role"] for m in plain["messages"]] == ["system", "user"]
        assert "cache" not in plain and plain["model"] == cached["model"]


@pytest.mark.e2e  # two whole `cacheplane up` start-ups (about 2 minutes): the e2e step
def test_a_restart_prints_no_new_demo_password_and_sends_no_second_burst(
    platform_admin, tmp_path, monkeypatch
) -> None:
    """``cacheplane up`` again: the people keep their password, so none is printed, and
    the 600 demo requests went out on the first start only."""
    from io import StringIO

    from django.core.management import call_command

    from frontend.demo import demo_traffic_due

    monkeypatch.setenv("CACHEPLANE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CACHEPLANE_DEMO_PASSWORD", raising=False)
    first, again = StringIO(), StringIO()
    call_command("demo", "--requests", "0", stdout=first)
    call_command("demo", "--requests", "0", stdout=again)
    assert "with password: " in first.getvalue()
    password = first.getvalue().split("with password: ")[1].split()[0]
    assert password not in again.getvalue() and "keep the password" in again.getvalue()
    assert Principal.objects.get(username="acme-legal-admin").check_password(password)
    assert demo_traffic_due(data_dir=tmp_path) is True  # the first start sends it
    assert demo_traffic_due(data_dir=tmp_path) is False  # every restart after does not
