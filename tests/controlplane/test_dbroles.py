"""Least privilege: the application's database role cannot rewrite the audit trail."""

from __future__ import annotations

import os

import psycopg
import pytest
from django.db import connection
from psycopg import errors, sql

from audit.models import AuditEvent
from controlplane.dbroles import app_role_grant
from tenants.actor import Actor
from tests.factories import TenantFactory

ROLE = f"cacheplane_app_test_{os.getpid()}"
PASSWORD = "app-role-test-password"


@pytest.fixture
def app_role(transactional_db):
    """A role granted exactly what `cacheplane up` / `cacheplane db-grant` grant the app
    (created by the test, as CI's and the embedded server's superuser can)."""
    ident = sql.Identifier(ROLE)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(ident, sql.Literal(PASSWORD))
        )
        restricted = app_role_grant(cursor=cursor, role=ROLE)
    db = connection.settings_dict
    params = {"host": db["HOST"], "dbname": db["NAME"], "user": ROLE, "password": PASSWORD}
    if db.get("PORT"):
        params["port"] = db["PORT"]
    yield params, restricted
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [ROLE]
        )
        cursor.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        cursor.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_the_app_role_cannot_change_delete_or_truncate_audit_rows(app_role) -> None:
    from audit.services import audit_record

    params, restricted = app_role
    assert {"audit_auditevent", "audit_auditdigest"} <= set(restricted)
    tenant = TenantFactory(slug="roles-a")
    audit_record(
        actor=Actor.cli(),
        action="tests.thing.create",
        tenant=tenant,
        target_type="thing",
        target_id="1",
    )
    event = AuditEvent.objects.get(action="tests.thing.create")
    attempts = [
        ("UPDATE audit_auditevent SET action = 'forged' WHERE id = %s", [event.pk]),
        ("DELETE FROM audit_auditevent WHERE id = %s", [event.pk]),
        ("TRUNCATE audit_auditevent CASCADE", None),
        ("DROP TRIGGER audit_event_append_only ON audit_auditevent", None),
        ("ALTER TABLE audit_auditevent DISABLE TRIGGER ALL", None),
        ("TRUNCATE audit_auditdigest", None),
    ]
    with psycopg.connect(**params, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0] >= 1
        for statement, args in attempts:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement, args)
        # The ordinary tables stay writable: the grants are not simply "nothing".
        with conn.transaction(force_rollback=True):
            updated = conn.execute(
                "UPDATE tenants_tenant SET display_name = 'renamed' WHERE id = %s", [tenant.pk]
            )
            assert updated.rowcount == 1
    event.refresh_from_db()
    assert event.action == "tests.thing.create"
    assert AuditEvent.objects.filter(pk=event.pk).exists()
