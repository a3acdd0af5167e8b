"""Registered reference workers and tenants with keys (the live server is in tests/conftest.py)."""

from __future__ import annotations

import contextlib

import pytest

from tests.workers.engine.support import tiny_config
from workers.engine.launcher import serve

MODEL = "test/ref-tiny"


@pytest.fixture
def fresh_gateway():
    """Forget the gateway's few-second caches between tests (new tenants, new workers)."""
    from gateway.app import prefix_index
    from gateway.directory import directory
    from gateway.identity import forget_identities

    directory.forget()
    forget_identities()
    prefix_index._entries.clear()
    from gateway import budget

    budget._has_budget.clear()
    yield
    directory.forget()
    forget_identities()


@pytest.fixture
def ref_workers(transactional_db, fresh_gateway, redis_flush):
    """Two reference workers registered in the control plane."""
    from tenants.actor import Actor
    from workers.services import worker_register

    with contextlib.ExitStack() as stack:
        running = []
        for n in range(2):
            worker = stack.enter_context(
                serve(tiny_config(num_blocks=512, max_model_len=1024,
                                  enable_prompt_tokens_details=True))
            )  # fmt: skip
            worker_register(actor=Actor.cli(), name=f"gw{n}", base_url=worker.base_url,
                            model=MODEL)  # fmt: skip
            running.append(worker)
        yield running


@pytest.fixture
def tenant_keys(transactional_db):
    """Two tenants, each with a developer service account and its API key."""
    from tenants.services import keys
    from tests.factories import HumanFactory, ServiceAccountFactory, TenantFactory, actor_for, bind

    made = {}
    for slug in ("gw-acme", "gw-globex"):
        tenant = TenantFactory(slug=slug)
        admin = HumanFactory()
        bind(admin, "tenant.admin", tenant)
        sa = ServiceAccountFactory(tenant=tenant)
        bind(sa, "tenant.developer", tenant)
        issued = keys.api_key_create(actor=actor_for(admin), tenant=tenant, name="app",
                                     principal=sa)  # fmt: skip
        made[slug] = {"tenant": tenant, "admin": admin, "sa": sa, "key": issued.plaintext,
                      "key_row": issued.key}  # fmt: skip
    return made
