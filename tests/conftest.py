"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def redis_flush():
    """A clean Redis database for tests that assert on keys."""
    from controlplane import ops

    client = ops.redis_client()
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Drop stray connections (worker threads, async executors) before the test DB goes."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
