"""Appending audit events (exports, digests and signing keys: the topic modules here).

``audit_record`` runs inside the caller's transaction: the event commits with the
change or not at all, and if the audit write fails the change fails (fail closed).
Appends to one chain are serialized by a row lock on its head, so concurrent writers
produce one linear chain with no forks and no gaps.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.chain import GENESIS_HASH, event_hash
from audit.models import PLATFORM_CHAIN, AuditChainHead, AuditEvent, Outcome
from audit.redaction import scrub
from audit.snapshot import Changes
from controlplane.request_context import get_request_id
from tenants.actor import Actor
from tenants.models import Tenant


def chain_for(tenant: Tenant | None) -> str:
    """The chain an event of ``tenant`` belongs to (platform events: ``platform``)."""
    return PLATFORM_CHAIN if tenant is None else f"tenant:{tenant.pk}"


def _lock_head(chain: str, tenant: Tenant | None) -> AuditChainHead:
    # Lock order (caches.services.locks): the tenant row before the chain head, always.
    # The event insert below needs FOR KEY SHARE on the tenant (its foreign key check);
    # taken after the head, it would wait for a transaction holding the tenant FOR UPDATE
    # (IAM, suspension) that itself waits for this head: a deadlock. Taking it first
    # means whoever holds the head never waits for anything but its own commit.
    if tenant is not None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {Tenant._meta.db_table} WHERE {Tenant._meta.pk.column} = %s "
                "FOR KEY SHARE",
                [tenant.pk],
            )
    # INSERT ... ON CONFLICT DO NOTHING makes creating a chain's head race-free; the
    # SELECT ... FOR UPDATE then holds the chain until the transaction ends.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {AuditChainHead._meta.db_table} (chain, seq, hash) "
            "VALUES (%s, 0, %s) ON CONFLICT (chain) DO NOTHING",
            [chain, GENESIS_HASH],
        )
    return AuditChainHead.objects.select_for_update().get(chain=chain)


def audit_record(
    *,
    actor: Actor,
    action: str,
    tenant: Tenant | None,
    outcome: str = Outcome.SUCCESS,
    target_type: str = "",
    target_id: str = "",
    changes: Changes | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the tenant's chain (or the platform chain) and return it.

    ``changes`` comes from ``audit.snapshot.diff`` only (a TypeError otherwise): the one
    helper that knows each model's sensitive fields. ``details`` is free-form context;
    secrets inside its values (URL credentials, API keys) are scrubbed like every value.
    """
    if changes is not None and not isinstance(changes, Changes):
        raise TypeError(
            "audit_record(changes=...) takes audit.snapshot.diff(before, after), "
            "not a hand-built dict"
        )
    chain = chain_for(tenant)
    with transaction.atomic():
        head = _lock_head(chain, tenant)
        record: dict[str, Any] = {
            "chain": chain,
            "seq": head.seq + 1,
            "prev_hash": head.hash,
            "occurred_at": timezone.now().isoformat(timespec="microseconds"),
            "tenant_id": str(tenant.pk) if tenant is not None else None,
            "actor_id": actor.principal_id,
            "actor_name": actor.name,
            "auth_method": actor.auth_method,
            "key_id": actor.key_id,
            "action": action,
            "target_type": target_type,
            "target_id": str(target_id),
            "outcome": str(outcome),
            "source_ip": actor.source_ip,
            "user_agent": actor.user_agent,
            "request_id": get_request_id(),
            "changes": scrub(dict(changes or {})),
            "details": scrub(details or {}),
        }
        record["hash"] = event_hash(record)
        event = AuditEvent.objects.create(
            chain=chain,
            seq=record["seq"],
            prev_hash=record["prev_hash"],
            hash=record["hash"],
            occurred_at=record["occurred_at"],
            tenant=tenant,
            actor_id=record["actor_id"],
            actor_name=record["actor_name"],
            auth_method=record["auth_method"],
            key_id=record["key_id"],
            action=action,
            target_type=target_type,
            target_id=record["target_id"],
            outcome=record["outcome"],
            source_ip=record["source_ip"],
            user_agent=record["user_agent"],
            request_id=record["request_id"],
            changes=record["changes"],
            details=record["details"],
        )
        head.seq = record["seq"]
        head.hash = record["hash"]
        head.save(update_fields=["seq", "hash"])
    return event
