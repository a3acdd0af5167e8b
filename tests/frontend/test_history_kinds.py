"""Every object kind's History (issue 27, point 1): an edit of a tenant, person, service
account, key, binding policy, cache, budget, rate limit, price or worker shows in that
object's History as a before/after diff, and the page that lists the object links there.

Through the Django test client; the browser test of one kind (a budget) is in
``test_browser_console.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import Client

from tests.factories import HumanFactory, actor_for

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Edited:
    """Where the edit is shown, what it changed, and who may read it."""

    history: str  # the object's History page
    listing: str  # the page linking to it
    action: str
    field: str
    before: str  # as rendered ("—": none)
    after: str
    platform: bool = False  # read by the platform admin (else the tenant's admin)
    by_ops: bool = False  # edited by the platform admin (else by the reader)


def _tenant(tenant, admin, ops) -> Edited:
    from tenants.services.tenants import tenant_update

    before = tenant.display_name
    tenant_update(actor=actor_for(ops), tenant=tenant, display_name="Tenant A renamed")
    return Edited(
        f"/t/{tenant.slug}/history/tenant/{tenant.pk}/",  # the tenant page's History tab
        f"/t/{tenant.slug}/",
        "tenants.tenant.update",
        "display_name",
        before,
        "Tenant A renamed",
        by_ops=True,
    )


def _tenant_on_the_platform(tenant, admin, ops) -> Edited:
    edited = _tenant(tenant, admin, ops)
    return Edited(
        f"/platform/history/tenant/{tenant.pk}/",
        "/platform/tenants/",
        edited.action,
        edited.field,
        edited.before,
        edited.after,
        platform=True,
    )


def _person(tenant, admin, ops) -> Edited:
    from identity.services.people import person_set_active

    person = HumanFactory(username="carol")
    person_set_active(actor=actor_for(ops), principal=person, active=False)
    return Edited(
        f"/platform/history/principal/{person.pk}/",
        "/platform/tenants/",
        "identity.principal.disable",
        "is_active",
        "True",
        "False",
        platform=True,
    )


def _persons_sessions_page(tenant, admin, ops) -> Edited:
    edited = _person(tenant, admin, ops)
    person_id = edited.history.rstrip("/").rsplit("/", 1)[1]
    return Edited(
        edited.history,
        f"/platform/people/{person_id}/sessions/",
        edited.action,
        edited.field,
        edited.before,
        edited.after,
        platform=True,
    )


def _service_account(tenant, admin, ops) -> Edited:
    from tenants.services.iam import service_account_create

    account = service_account_create(
        actor=actor_for(admin), tenant=tenant, name="indexer", description="nightly"
    )
    return Edited(
        f"/t/{tenant.slug}/history/principal/{account.pk}/",
        f"/t/{tenant.slug}/access/",
        "tenants.service_account.create",
        "description",
        "—",
        "nightly",
    )


def _key(tenant, admin, ops) -> Edited:
    from tenants.services.keys import api_key_create, api_key_revoke

    issued = api_key_create(actor=actor_for(admin), tenant=tenant, name="ci")
    key = api_key_revoke(actor=actor_for(admin), tenant=tenant, key_id=str(issued.key.pk))
    return Edited(
        f"/t/{tenant.slug}/history/api_key/{key.pk}/",
        f"/t/{tenant.slug}/keys/",
        "tenants.api_key.revoke",
        "revoked_at",
        "—",
        key.revoked_at.isoformat()[:19],  # rendered as stored (ISO 8601)
    )


def _binding_policy(tenant, admin, ops) -> Edited:
    from tenants.services import iam

    policy = iam.policy_get(tenant=tenant)
    specs = [
        iam.BindingSpec(role=b.role.name, principal_id=str(b.principal_id)) for b in policy.bindings
    ]
    developer = HumanFactory(username="dev")
    iam.policy_set(
        actor=actor_for(admin),
        tenant=tenant,
        etag=policy.etag,
        bindings=[*specs, iam.BindingSpec("tenant.developer", str(developer.pk))],
    )
    return Edited(
        f"/t/{tenant.slug}/history/iam_policy/{tenant.pk}/",
        f"/t/{tenant.slug}/access/",
        "tenants.policy.set",
        "version",
        "1",
        "2",
    )


def _cache(tenant, admin, ops) -> Edited:
    from caches.services.lifecycle import cache_set_policy
    from tests.frontend.browser_helpers import cache_row_create

    cache = cache_row_create(tenant, name="faq")
    cache_set_policy(cache=cache, actor=actor_for(admin), ttl_policy="fixed", ttl_seconds=900)
    return Edited(
        f"/t/{tenant.slug}/history/cache/{cache.pk}/",
        f"/t/{tenant.slug}/caches/{cache.pk}/",
        "caches.cache.set_policy",
        "ttl_seconds",
        "600",
        "900",
    )


def _budget(tenant, admin, ops) -> Edited:
    from billing.services import budget_create, budget_update

    budget = budget_create(
        actor=actor_for(admin), tenant=tenant, name="monthly", period="month", limit_micros=5
    )
    budget_update(actor=actor_for(admin), budget=budget, changes={"limit_micros": 9_000_000})
    return Edited(
        f"/t/{tenant.slug}/history/budget/{budget.pk}/",
        f"/t/{tenant.slug}/budgets/",
        "billing.budget.update",
        "limit_micros",
        "5",
        "9000000",
    )


def _rate_limit(tenant, admin, ops) -> Edited:
    from gateway.services import rate_limit_create, rate_limit_update

    limit = rate_limit_create(
        tenant=tenant,
        actor=actor_for(admin),
        api_key_id=None,
        values={"requests_per_minute": 60},
    )
    rate_limit_update(limit=limit, actor=actor_for(admin), changes={"requests_per_minute": 90})
    return Edited(
        f"/t/{tenant.slug}/history/rate_limit/{limit.pk}/",
        f"/t/{tenant.slug}/budgets/",
        "gateway.rate_limit.update",
        "requests_per_minute",
        "60",
        "90",
    )


def _model_price(tenant, admin, ops) -> Edited:
    from billing.models import ModelPrice
    from billing.services.prices import model_price_correct
    from tests.billing.ledger_support import FLASH_LITE, price_book_restore

    price_book_restore()  # a transactional test before this one may have flushed it
    price = ModelPrice.objects.filter(model=FLASH_LITE, superseded_at__isnull=True).first()
    assert price is not None
    before = price.input_per_mtok
    new = model_price_correct(
        actor=actor_for(ops), price=price, rates={"input_per_mtok": "0.125"}, source="test"
    )
    return Edited(
        f"/platform/history/modelprice/{new.pk}/",
        "/platform/prices/",
        "billing.price.correct",
        "input_per_mtok",
        str(before),
        str(new.input_per_mtok),
        platform=True,
    )


def _pool_price(tenant, admin, ops) -> Edited:
    from billing.services.prices import pool_price_correct, pool_price_create

    rates = {
        "gpu_hour_usd": "4.00",
        "prefill_tokens_per_gpu_second": "2000",
        "decode_tokens_per_gpu_second": "50",
        "kv_blocks_per_gpu": 4096,
    }
    price = pool_price_create(actor=actor_for(ops), pool="history-pool", rates=rates, source="t")
    new = pool_price_correct(
        actor=actor_for(ops), price=price, rates={"gpu_hour_usd": "5.00"}, source="t"
    )
    return Edited(
        f"/platform/history/poolprice/{new.pk}/",
        "/platform/prices/",
        "billing.pool_price.correct",
        "gpu_hour_usd",
        str(price.gpu_hour_usd),
        str(new.gpu_hour_usd),
        platform=True,
    )


def _worker(tenant, admin, ops) -> Edited:
    from workers.models import Worker
    from workers.services import worker_set_draining

    worker = Worker.objects.create(name="gpu-1", base_url="http://127.0.0.1:9/", model="m")
    worker_set_draining(actor=actor_for(ops), worker=worker, draining=True)
    return Edited(
        f"/platform/history/worker/{worker.pk}/",
        "/platform/workers/",
        "workers.worker.drain",
        "state",
        "healthy",
        "draining",
        platform=True,
    )


KINDS: dict[str, Callable[..., Edited]] = {
    "tenant": _tenant,
    "tenant on the platform": _tenant_on_the_platform,
    "person": _person,
    "person's sessions page": _persons_sessions_page,
    "service account": _service_account,
    "key": _key,
    "binding policy": _binding_policy,
    "cache": _cache,
    "budget": _budget,
    "rate limit": _rate_limit,
    "model price": _model_price,
    "pool price": _pool_price,
    "worker": _worker,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_edit_shows_as_a_diff_in_its_objects_history_linked_from_its_page(
    kind, tenant_a, admin_a, platform_admin
) -> None:
    edited = KINDS[kind](tenant_a, admin_a, platform_admin)
    client = Client()
    client.force_login(platform_admin if edited.platform else admin_a)
    page = client.get(edited.history)
    assert page.status_code == 200, (kind, page.status_code)
    html = page.content.decode()
    assert f"<code>{edited.action}</code>" in html, kind
    row = html.split(f'data-field="{edited.field}"')[1].split("</tr>")[0]
    assert f"<del>{edited.before}</del>" in row, (kind, row)
    assert f"<ins>{edited.after}" in row, (kind, row)
    actor = platform_admin if edited.platform or edited.by_ops else admin_a
    assert f'/history/principal/{actor.pk}/">{actor.username}</a>' in html  # the actor
    listing = client.get(edited.listing)
    assert listing.status_code == 200, (kind, listing.status_code)
    assert f'href="{edited.history}"' in listing.content.decode(), kind
