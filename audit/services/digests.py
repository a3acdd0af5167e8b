"""Hourly signed digests of every chain head, each chained to the chain's previous one.

Like CloudTrail's digest files: a digest says "at this hour the chain's head was (seq,
hash)", signed by the deployment key and linked to the previous digest of the chain by
its hash. Hash chaining makes every earlier event part of the signed head, so a later
export or ``cacheplane audit verify-digests`` proves that nothing up to the head was
rewritten in the database since, even by someone able to recompute the hashes.

One digest chain per audit chain (not one digest of all heads): a tenant's export then
carries its own digests without revealing other tenants' chains or event counts. A
chain that did not move since its last digest gets none (that digest still covers it).

Digests are not audit events themselves: an event per digest would move every chain's
head each hour and make the job feed itself.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from audit import selectors
from audit.bundle import digest_hash, digest_payload, tenant_id_of_chain
from audit.chain import GENESIS_HASH, iter_chunks
from audit.models import AuditChainHead, AuditDigest, AuditEvent
from audit.services.signing_keys import audit_signing_key_register
from audit.signing import Signer
from controlplane.task_queue import task_enqueue

logger = logging.getLogger(__name__)

#: Chains per fan-out task: one task signs at most this many heads.
DIGEST_BATCH = 200
#: Enqueued by name (controlplane.task_queue): the task imports this module, not back.
DIGEST_CREATE_BATCH_TASK = "audit.tasks.audit_digest_create_batch_task"


def audit_digest_hour(moment: datetime) -> datetime:
    """The hour (UTC, truncated) a digest made at ``moment`` belongs to."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def audit_digest_schedule(*, now: datetime | None = None) -> int:
    """Fan out this hour's digests: one task per batch of chains whose head moved since
    their last digest. Returns the number of tasks enqueued."""
    hour = audit_digest_hour(now or timezone.now()).isoformat()
    batches = 0
    for batch in iter_chunks(selectors.audit_digest_chains_due_all_tenants(), DIGEST_BATCH):
        task_enqueue(DIGEST_CREATE_BATCH_TASK, hour, batch)
        batches += 1
    return batches


def audit_digest_create_batch(*, hour: datetime, chains: list[str]) -> list[AuditDigest]:
    """Create the digest of ``hour`` for each chain (see ``audit_digest_create``)."""
    signer = audit_signing_key_register()
    made = []
    for chain in chains:
        digest = audit_digest_create(chain=chain, hour=hour, signer=signer)
        if digest is not None:
            made.append(digest)
    return made


def audit_digest_create(
    *, chain: str, hour: datetime, signer: Signer | None = None
) -> AuditDigest | None:
    """Sign the current head of one chain for ``hour``, linked to its previous digest.

    Idempotent: None when the chain already has a digest for that hour (or a later
    one), did not move since its last digest, or has no events. Holds the chain's head
    lock for the few milliseconds it takes, so the head cannot move meanwhile.
    """
    signer = signer or audit_signing_key_register()
    hour = audit_digest_hour(hour)
    with transaction.atomic():
        head = AuditChainHead.objects.select_for_update().filter(chain=chain).first()
        if head is None or head.seq == 0:
            return None
        previous = AuditDigest.objects.filter(chain=chain).order_by("-number").first()
        if previous is not None and (previous.hour >= hour or previous.head_seq == head.seq):
            return None
        stored = (
            AuditEvent.objects.filter(chain=chain, seq=head.seq)
            .values_list("hash", flat=True)
            .first()
        )
        if stored != head.hash:
            # Never sign a head the events table contradicts; verify-chain says more.
            logger.error("audit chain head disagrees with its events", extra={"chain": chain})
            return None
        digest = AuditDigest(
            chain=chain,
            tenant_id=tenant_id_of_chain(chain),
            number=previous.number + 1 if previous is not None else 1,
            hour=hour,
            head_seq=head.seq,
            head_hash=head.hash,
            prev_digest_hash=previous.digest_hash if previous is not None else GENESIS_HASH,
            key_id=signer.kid,
            created_at=timezone.now(),
        )
        body = selectors.audit_digest_record(digest)
        digest.digest_hash = digest_hash(body)
        digest.signature = signer.sign(digest_payload(body))
        digest.save(force_insert=True)
    return digest
