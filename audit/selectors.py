"""Reads of the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from audit.chain import ChainProblem, verify_chain
from audit.models import PLATFORM_CHAIN, AuditEvent
from tenants.models import Tenant


def audit_event_list(*, tenant: Tenant) -> QuerySet[AuditEvent]:
    """One tenant's events, newest first."""
    return AuditEvent.objects.filter(tenant=tenant).order_by("-occurred_at", "-seq")


def audit_event_record(event: AuditEvent) -> dict[str, Any]:
    """The canonical record of an event (what its hash covers, plus the hash)."""
    return {
        "chain": event.chain,
        "seq": event.seq,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "occurred_at": event.occurred_at.isoformat(timespec="microseconds"),
        "tenant_id": str(event.tenant_id) if event.tenant_id else None,
        "actor_id": event.actor_id,
        "actor_name": event.actor_name,
        "auth_method": event.auth_method,
        "key_id": event.key_id,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "outcome": event.outcome,
        "source_ip": event.source_ip,
        "user_agent": event.user_agent,
        "request_id": event.request_id,
        "changes": event.changes,
        "details": event.details,
    }


def audit_chain_records(chain: str) -> Iterator[dict[str, Any]]:
    """Every event of one chain in sequence order, streamed in chunks."""
    events = AuditEvent.objects.filter(chain=chain).order_by("seq")
    for event in events.iterator(chunk_size=2000):
        yield audit_event_record(event)


def audit_chain_names_all_tenants() -> list[str]:
    """Every chain in the database (cross-tenant on purpose: verification covers all)."""
    return list(AuditEvent.objects.values_list("chain", flat=True).distinct().order_by("chain"))


def audit_chain_verify(chain: str) -> tuple[int, ChainProblem | None]:
    """Recompute one chain from the database; returns (events checked, first problem)."""
    return verify_chain(chain, audit_chain_records(chain))


def tenant_chain_name(tenant: Tenant) -> str:
    return f"tenant:{tenant.pk}"


__all__ = ["PLATFORM_CHAIN", "audit_chain_verify", "audit_event_list"]
