"""Fixtures for audit export, digest and verification tests."""

from __future__ import annotations

import pytest

from tests.audit.helpers import KEY_1, KID_1
from tests.factories import HumanFactory, bind


@pytest.fixture(autouse=True)
def audit_files(settings, tmp_path):
    """Exports go to a per-test folder, signed with a fixed test key."""
    settings.CACHEPLANE_EXPORT_DIR = tmp_path / "exports"
    settings.CACHEPLANE_AUDIT_SIGNING_KEY = KEY_1
    settings.CACHEPLANE_AUDIT_SIGNING_KEY_ID = KID_1
    return settings


@pytest.fixture
def celery_eager():
    """Run ``.delay()`` inline, as a worker would (the broker is the network boundary)."""
    from controlplane.celery import app

    previous = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = previous


@pytest.fixture
def auditor_a(tenant_a):
    user = HumanFactory(username="audra")
    bind(user, "tenant.auditor", tenant_a)
    return user


@pytest.fixture
def viewer_a(tenant_a):
    user = HumanFactory(username="vic")
    bind(user, "tenant.viewer", tenant_a)
    return user


@pytest.fixture
def platform_auditor(db):
    user = HumanFactory(username="pat")
    bind(user, "platform.auditor", None)
    return user
