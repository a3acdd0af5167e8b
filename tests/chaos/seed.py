"""Seed a chaos stack's fresh database (run as ``python -m tests.chaos.seed WORKER_URL``).

Prints JSON: the tenant slug, an admin's API key (REST) and a developer service
account's key (gateway). Runs in a subprocess because the test process's Django is
connected to the session's test database, not to the chaos stack's own PostgreSQL.
"""

from __future__ import annotations

import json
import sys


def main(worker_url: str, model: str, *extra: str) -> None:
    import django

    django.setup()
    from tenants.actor import Actor
    from tenants.services import keys
    from tenants.services.tenants import tenant_create
    from tests.factories import HumanFactory, ServiceAccountFactory, actor_for, bind
    from workers.services import worker_register

    admin = HumanFactory(username="chaos-admin")
    tenant = tenant_create(actor=Actor.cli(), slug="chaos", display_name="Chaos", admin=admin)
    service_account = ServiceAccountFactory(tenant=tenant)
    bind(service_account, "tenant.developer", tenant)
    rest_key = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="rest")
    gateway_key = keys.api_key_create(
        actor=actor_for(admin), tenant=tenant, name="gw", principal=service_account
    )
    worker_register(actor=Actor.cli(), name="chaos-w0", base_url=worker_url, model=model)
    seeded = {
        "tenant": tenant.slug,
        "tenant_id": str(tenant.pk),
        "rest_key": rest_key.plaintext,
        "gateway_key": gateway_key.plaintext,
        "principal_id": str(service_account.pk),
    }
    if "--budget" in extra:
        seeded["budget_id"] = _budget(admin, tenant, service_account)
    print(json.dumps(seeded))


def _budget(admin, tenant, service_account) -> str:
    """A hard budget on the gateway's service account over a priced pool (every decoded
    token 1 µ$), so each gateway request takes a hold and settles it."""
    from billing.services.budgets import budget_create
    from tests.factories import actor_for
    from tests.gateway.support import price_pool_decode_only

    price_pool_decode_only(decode_tokens_per_second="1000")
    budget = budget_create(
        actor=actor_for(admin),
        tenant=tenant,
        name="faults",
        period="month",
        limit_micros=10**12,
        hard_limit=True,
        principal_id=str(service_account.pk),
    )
    return str(budget.pk)


if __name__ == "__main__":
    main(*sys.argv[1:])
