"""Reads of the audit log: events, exports, digests and published signing keys."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import F, Max, Min, OuterRef, Q, QuerySet, Subquery

from audit.bundle import DIGEST_KIND, DIGEST_VERSION, ExportFilters
from audit.chain import GENESIS_HASH, ChainProblem, event_hash, verify_chain
from audit.errors import ExportNotFound
from audit.models import (
    AuditChainHead,
    AuditDigest,
    AuditEvent,
    AuditExport,
    AuditSigningKey,
)
from audit.signing import ALGORITHM, KeySet, public_key_load, public_key_pem
from tenants.models import Tenant


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


# --- Event search (the console's audit page) ----------------------------------------------


def audit_event_search(
    *,
    tenant: Tenant,
    action: str | None = None,
    outcome: str | None = None,
    actor: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """One tenant's events matching the filters (the export filter rules), newest first
    by sequence (stable for cursor pagination: seq is unique within the tenant's chain)."""
    filters = ExportFilters(since=since, until=until, actor=actor, action=action, outcome=outcome)
    return (
        AuditEvent.objects.filter(chain=tenant_chain_name(tenant))
        .filter(audit_filters_q(filters))
        .order_by("-seq")
    )


def audit_filters_q(filters: ExportFilters) -> Q:
    """``ExportFilters.matches`` as a query (the two must select the same events)."""
    q = Q()
    if filters.since is not None:
        q &= Q(occurred_at__gte=filters.since)
    if filters.until is not None:
        q &= Q(occurred_at__lt=filters.until)
    if filters.outcome is not None:
        q &= Q(outcome=filters.outcome)
    if filters.action is not None:
        if filters.action.endswith("*"):
            q &= Q(action__startswith=filters.action[:-1])
        else:
            q &= Q(action=filters.action)
    if filters.actor is not None:
        q &= Q(actor_id=filters.actor) | Q(actor_name=filters.actor)
    return q


# --- Exports ------------------------------------------------------------------------------


def export_dir() -> Path:
    """Where export bundles are written (``CACHEPLANE_EXPORT_DIR``)."""
    return Path(settings.CACHEPLANE_EXPORT_DIR)


def audit_export_list(*, tenant: Tenant) -> QuerySet[AuditExport]:
    """The tenant's exports (every auditor of the tenant sees them), newest first."""
    exports = AuditExport.objects.filter(tenant=tenant).select_related("tenant")
    return exports.order_by("-created_at")


def audit_export_list_platform() -> QuerySet[AuditExport]:
    """Platform exports (tenant null), newest first."""
    return AuditExport.objects.filter(tenant__isnull=True).order_by("-created_at")


def audit_export_get(*, tenant: Tenant, export_id: str) -> AuditExport:
    """One of the tenant's exports; ExportNotFound for another tenant's or a bad id."""
    pk = _uuid_or_none(export_id)
    export = audit_export_list(tenant=tenant).filter(pk=pk).first() if pk is not None else None
    if export is None:
        raise ExportNotFound("No such export.")
    return export


def audit_export_get_platform(*, export_id: str) -> AuditExport:
    """One platform export; ExportNotFound otherwise (tenant exports included)."""
    pk = _uuid_or_none(export_id)
    export = audit_export_list_platform().filter(pk=pk).first() if pk is not None else None
    if export is None:
        raise ExportNotFound("No such export.")
    return export


def audit_export_get_unscoped(*, export_id: str) -> AuditExport | None:
    """Any export by id, or None. Unscoped on purpose: only for the export task, whose
    id argument was issued by the service that created the row."""
    pk = _uuid_or_none(export_id)
    if pk is None:
        return None
    return AuditExport.objects.filter(pk=pk).select_related("tenant").first()


def _uuid_or_none(value: str) -> str | None:
    import uuid

    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return None


@dataclass(frozen=True)
class ChainSegment:
    """The sequence range of one chain an export covers."""

    chain: str
    first_seq: int
    last_seq: int

    @property
    def size(self) -> int:
        return self.last_seq - self.first_seq + 1


def audit_export_segments(*, tenant: Tenant, filters: ExportFilters) -> list[ChainSegment]:
    """The range of the tenant's chain from its first to its last selected event."""
    return _segments(AuditEvent.objects.filter(chain=tenant_chain_name(tenant)), filters)


def audit_export_segments_all_tenants(*, filters: ExportFilters) -> list[ChainSegment]:
    """Per chain (every tenant's and the platform's), the range from the first to the
    last selected event. Cross-tenant on purpose: platform auditors export everything."""
    return _segments(AuditEvent.objects.all(), filters)


def _segments(events: QuerySet[AuditEvent], filters: ExportFilters) -> list[ChainSegment]:
    rows = (
        events.filter(audit_filters_q(filters))
        .values("chain")
        .annotate(first=Min("seq"), last=Max("seq"))
        .order_by("chain")
    )
    return [ChainSegment(r["chain"], r["first"], r["last"]) for r in rows]


def audit_chain_segment_events(
    *, chain: str, first_seq: int, last_seq: int
) -> Iterator[AuditEvent]:
    """Every event of one chain in a sequence range, in order, streamed from the server
    in chunks (constant memory whatever the range)."""
    events = AuditEvent.objects.filter(chain=chain, seq__gte=first_seq, seq__lte=last_seq)
    return events.order_by("seq").iterator(chunk_size=2000)


# --- Digests ------------------------------------------------------------------------------


def audit_digest_record(digest: AuditDigest) -> dict[str, Any]:
    """The JSON form of a digest: its signed fields plus digest hash and signature."""
    return {
        "kind": DIGEST_KIND,
        "v": DIGEST_VERSION,
        "chain": digest.chain,
        "number": digest.number,
        "hour": digest.hour.isoformat(),
        "head_seq": digest.head_seq,
        "head_hash": digest.head_hash,
        "prev_digest_hash": digest.prev_digest_hash,
        "created_at": digest.created_at.isoformat(timespec="microseconds"),
        "key_id": digest.key_id,
        "digest_hash": digest.digest_hash,
        "signature": digest.signature,
    }


def audit_digest_latest_covering(
    *, chain: str, first_seq: int, last_seq: int
) -> AuditDigest | None:
    """The chain's latest digest whose head lies in (or just before) a sequence range."""
    return (
        AuditDigest.objects.filter(chain=chain, head_seq__gte=first_seq - 1, head_seq__lte=last_seq)
        .order_by("-number")
        .first()
    )


def audit_digest_chains_due_all_tenants() -> list[str]:
    """Chains whose head moved since their latest digest (or that have none yet).
    Cross-tenant on purpose: the hourly digest job covers every chain."""
    latest = AuditDigest.objects.filter(chain=OuterRef("chain")).order_by("-number")
    return list(
        AuditChainHead.objects.filter(seq__gt=0)
        .annotate(digested=Subquery(latest.values("head_seq")[:1]))
        .filter(Q(digested__isnull=True) | Q(seq__gt=F("digested")))
        .values_list("chain", flat=True)
        .order_by("chain")
    )


def audit_digest_chain_names_all_tenants() -> list[str]:
    """Every chain that has digests (cross-tenant on purpose: verification covers all)."""
    return list(AuditDigest.objects.values_list("chain", flat=True).distinct().order_by("chain"))


def audit_digest_chain_verify(chain: str) -> tuple[int, list[str]]:
    """Check one chain's digests against each other and against the events now in the
    database: numbering, links, hashes and signatures, then a walk of the chain up to
    the newest digest comparing each digest head. Returns (digests checked, problems)."""
    from audit.verify import digest_problem

    keys = audit_signing_keyset()
    problems: list[str] = []
    heads: dict[int, AuditDigest] = {}
    expected_number, prev_hash, checked = 1, GENESIS_HASH, 0
    for digest in AuditDigest.objects.filter(chain=chain).order_by("number").iterator():
        checked += 1
        label = f"digest #{digest.number} ({digest.hour.isoformat()})"
        if digest.number != expected_number:
            problems.append(f"{label}: digest #{expected_number} is missing before it")
        if digest.prev_digest_hash != prev_hash:
            problems.append(f"{label}: does not link to the previous digest")
        problem = digest_problem(audit_digest_record(digest), keys)
        if problem:
            problems.append(f"{label}: {problem}")
        heads[digest.head_seq] = digest
        expected_number, prev_hash = digest.number + 1, digest.digest_hash
    if not heads:
        return checked, problems
    newest = max(heads)
    expected_seq, prev_event_hash = 1, GENESIS_HASH
    for record in audit_chain_records(chain):
        seq = record["seq"]
        if seq > newest:
            break
        if seq != expected_seq or record["prev_hash"] != prev_event_hash:
            problems.append(f"event seq {expected_seq}: the chain is broken (run verify-chain)")
            break
        computed = event_hash(record)
        signed = heads.get(seq)
        if signed is not None and computed != signed.head_hash:
            problems.append(
                f"digest #{signed.number} ({signed.hour.isoformat()}): event seq {seq} no "
                "longer has the signed hash: the chain was rewritten after this digest"
            )
        expected_seq, prev_event_hash = seq + 1, computed
    else:
        if expected_seq <= newest:
            problems.append(
                f"events up to seq {newest} are signed but only {expected_seq - 1} remain"
            )
    return checked, problems


# --- Signing keys -------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedKey:
    kid: str
    algorithm: str
    public_key: str
    fingerprint: str
    created_at: datetime | None
    retired_at: datetime | None
    active: bool


def audit_signing_key_list() -> list[PublishedKey]:
    """Every registered public key, oldest first, plus the active key if it has not
    signed anything yet (so verifiers can fetch it before the first export)."""
    from audit.errors import SigningKeyMissing
    from audit.services.signing_keys import signing_key_active

    try:
        # Without create: a read never generates the development key file.
        active = signing_key_active(create=False)
    except SigningKeyMissing:
        active = None  # production without a key: publish the registered ones only
    keys = [
        PublishedKey(
            kid=row.kid,
            algorithm=row.algorithm,
            public_key=row.public_key,
            fingerprint=row.fingerprint,
            created_at=row.created_at,
            retired_at=row.retired_at,
            active=active is not None and row.kid == active.kid,
        )
        for row in AuditSigningKey.objects.order_by("created_at", "kid")
    ]
    if active is not None and not any(key.kid == active.kid for key in keys):
        keys.append(
            PublishedKey(
                kid=active.kid,
                algorithm=ALGORITHM,
                public_key=public_key_pem(active.public_key),
                fingerprint=active.fingerprint,
                created_at=None,
                retired_at=None,
                active=True,
            )
        )
    return keys


def audit_signing_keyset() -> KeySet:
    """The published keys as a verifier's key set."""
    return KeySet(by_kid={k.kid: public_key_load(k.public_key) for k in audit_signing_key_list()})
