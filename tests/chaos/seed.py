"""Seed a chaos stack's fresh database (run as ``python -m tests.chaos.seed WORKER_URL``).

Prints JSON: the tenant slug, an admin's API key (REST) and a developer service
account's key (gateway). Runs in a subprocess because the test process's Django is
connected to the session's test database, not to the chaos stack's own PostgreSQL.
"""

from __future__ import annotations

import json
import sys


def main(worker_url: str, model: str) -> None:
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
    print(
        json.dumps(
            {
                "tenant": tenant.slug,
                "tenant_id": str(tenant.pk),
                "rest_key": rest_key.plaintext,
                "gateway_key": gateway_key.plaintext,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
