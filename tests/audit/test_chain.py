"""The audit log: same-transaction writes, hash chains, concurrency, append-only trigger."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, IntegrityError, connection, connections, transaction

from audit.chain import GENESIS_HASH
from audit.models import PLATFORM_CHAIN, AuditEvent
from audit.selectors import audit_chain_verify, tenant_chain_name
from audit.services import audit_record
from audit.snapshot import EMPTY, diff, values_snapshot
from tenants.actor import Actor
from tenants.errors import DuplicateName
from tenants.models import Tenant
from tenants.services.tenants import tenant_create
from tests.factories import actor_for


@pytest.mark.django_db
def test_events_link_into_a_chain_that_verifies(tenant_a, admin_a) -> None:
    for n in range(5):
        audit_record(
            actor=actor_for(admin_a), action="tests.thing.poke", tenant=tenant_a, target_id=str(n)
        )
    events = list(AuditEvent.objects.filter(tenant=tenant_a).order_by("seq"))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert events[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in zip(events, events[1:], strict=False))
    checked, problem = audit_chain_verify(tenant_chain_name(tenant_a))
    assert (checked, problem) == (5, None)


@pytest.mark.django_db
def test_event_records_actor_request_and_redacts_secrets_by_value(tenant_a, admin_a) -> None:
    from controlplane.request_context import reset_request_id, set_request_id

    token = set_request_id("req-audit-0001")
    try:
        event = audit_record(
            actor=Actor(
                principal=admin_a,
                auth_method="api_key",
                key_id="k1",
                source_ip="10.1.2.3",
                user_agent="pytest",
            ),
            action="tenants.api_key.create",
            tenant=tenant_a,
            changes=diff(EMPTY, values_snapshot({"api_key": "k"}, sensitive={"api_key"})),
            details={"hook": "https://u:hunter2@h.example.com/x", "name": "ok"},
        )
    finally:
        reset_request_id(token)
    assert event.request_id == "req-audit-0001"
    assert (event.actor_name, event.auth_method, event.key_id) == ("alice", "api_key", "k1")
    assert event.source_ip == "10.1.2.3"
    assert event.changes["api_key"] == {"before": None, "after": "[redacted]"}
    assert event.details == {"hook": "https://[redacted]@h.example.com/x", "name": "ok"}


@pytest.mark.django_db
def test_audit_rows_cannot_be_updated_or_deleted(tenant_a, admin_a) -> None:
    event = audit_record(actor=actor_for(admin_a), action="tests.thing.poke", tenant=tenant_a)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(action="tests.thing.hidden")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM audit_auditevent")
    assert AuditEvent.objects.get(pk=event.pk).action == "tests.thing.poke"


@pytest.mark.django_db
def test_failed_change_leaves_no_audit_row_and_failed_audit_fails_the_change(admin_a) -> None:
    tenant_create(actor=actor_for(admin_a), slug="dup-slug", display_name="one")
    before = AuditEvent.objects.count()
    with pytest.raises(DuplicateName):
        tenant_create(actor=actor_for(admin_a), slug="dup-slug", display_name="two")
    assert AuditEvent.objects.count() == before
    # Fail closed: if the audit insert fails, the tenant is not created either.
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # flush pending FK checks first
        cursor.execute(
            "ALTER TABLE audit_auditevent ADD CONSTRAINT t_no_insert CHECK (false) NOT VALID"
        )
        tenant_create(actor=actor_for(admin_a), slug="never-created", display_name="x")
    assert not Tenant.objects.filter(slug="never-created").exists()


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_appends_leave_one_valid_chain(tenant_a) -> None:
    barrier = threading.Barrier(20)
    errors: list[BaseException] = []

    def append(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                audit_record(
                    actor=Actor.system(),
                    action="tests.thing.race",
                    tenant=tenant_a,
                    target_id=str(n),
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=append, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    seqs = sorted(AuditEvent.objects.filter(tenant=tenant_a).values_list("seq", flat=True))
    assert seqs == list(range(1, 21))
    assert audit_chain_verify(tenant_chain_name(tenant_a)) == (20, None)


@pytest.mark.django_db
def test_verify_chain_command_reports_the_first_broken_link(tenant_a, admin_a, capsys) -> None:
    for n in range(3):
        audit_record(
            actor=actor_for(admin_a), action="tests.thing.poke", tenant=tenant_a, target_id=str(n)
        )
    call_command("audit", "verify-chain", "--tenant", tenant_a.slug)
    assert "OK" in capsys.readouterr().out
    # A DBA with trigger rights edits history behind the application's back.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
        cursor.execute(
            "UPDATE audit_auditevent SET target_id = 'forged' WHERE chain = %s AND seq = 2",
            [tenant_chain_name(tenant_a)],
        )
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")
    with pytest.raises(CommandError):
        call_command("audit", "verify-chain", "--tenant", tenant_a.slug)
    out = capsys.readouterr().out
    assert "BROKEN" in out and "seq 2" in out and "modified" in out


@pytest.mark.django_db
def test_deleted_event_is_reported_as_a_gap(tenant_a, admin_a) -> None:
    for n in range(3):
        audit_record(
            actor=actor_for(admin_a), action="tests.thing.poke", tenant=tenant_a, target_id=str(n)
        )
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only")
        cursor.execute(
            "DELETE FROM audit_auditevent WHERE chain = %s AND seq = 2",
            [tenant_chain_name(tenant_a)],
        )
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only")
    checked, problem = audit_chain_verify(tenant_chain_name(tenant_a))
    assert checked == 1
    assert problem is not None and "gap" in problem.reason and problem.seq == 2


@pytest.mark.django_db
def test_platform_events_form_their_own_chain(admin_a) -> None:
    tenant_create(actor=actor_for(admin_a), slug="plat-chain", display_name="x")
    assert AuditEvent.objects.filter(chain=PLATFORM_CHAIN, action="tenants.tenant.create").exists()
    assert audit_chain_verify(PLATFORM_CHAIN)[1] is None
