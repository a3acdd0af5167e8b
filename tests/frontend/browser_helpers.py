"""Set-up shared by the browser tests (``test_browser.py``, ``test_browser_console.py``):
people with a role, and the usual tenant "acme" with its admin, logged in."""

from __future__ import annotations

from typing import Any

from tests.frontend.conftest import PASSWORD


def user_create(username: str, role: str | None, tenant: Any) -> Any:
    """A person who can log in with ``PASSWORD``, bound to ``role`` on ``tenant``."""
    from tests.factories import HumanFactory, bind

    user = HumanFactory(username=username, password=PASSWORD)
    if role:
        bind(user, role, tenant)
    return user


def platform_admin_create(username: str = "ops") -> Any:
    return user_create(username, "platform.admin", None)


def acme_with_admin(username: str = "acme-admin") -> tuple[Any, Any]:
    """The tenant ``acme`` and its admin ``username``."""
    from tests.factories import TenantFactory

    tenant = TenantFactory(slug="acme")
    return tenant, user_create(username, "tenant.admin", tenant)


def acme_admin_at(console: Any, path: str) -> Any:
    """:func:`acme_with_admin`, logged in, on ``path``; returns the tenant."""
    tenant, admin = acme_with_admin()
    console.login(admin.username)
    console.go(path)
    return tenant


def cache_row_create(tenant: Any, *, name: str, state: str = "active", digest: str = "a") -> Any:
    """A vLLM cache row of the reference model in ``state`` (no provider call)."""
    from caches.models import CacheObject
    from tests.conftest import REF_MODEL

    return CacheObject.objects.create(
        tenant=tenant,
        name=name,
        provider="vllm",
        model=REF_MODEL,
        content={},
        content_digest=digest * 64,
        ttl_seconds=600,
        state=state,
    )


def default_pool_priced() -> None:
    """A price for the ``default`` GPU pool the reference workers run in, so gateway
    traffic costs something (the gateway's price cache forgotten). The seeded price book is
    put back first: an earlier transactional test flushed it, and usage booked before now
    is priced only by the seeded version."""
    from billing.services.prices import pool_price_create
    from gateway import pricing
    from tests.billing.ledger_support import price_book_restore
    from tests.factories import actor_for

    price_book_restore()
    pool_price_create(
        actor=actor_for(None),
        pool="default",
        source="test",
        rates={
            "gpu_hour_usd": "4.00",
            "prefill_tokens_per_gpu_second": "2000",
            "decode_tokens_per_gpu_second": "50",
            "kv_blocks_per_gpu": 4096,
        },
    )
    pricing.forget()
