"""Append-only audit events in hash chains (one per tenant, one for the platform)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from tenants.models import Tenant

PLATFORM_CHAIN = "platform"


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILED = "failed", "Failed"


class AuditEvent(models.Model):
    """One security-relevant fact: who did what to which target, with what outcome.

    Rows are never updated or deleted: a PostgreSQL trigger rejects both (see migration
    0002). ``seq``/``prev_hash``/``hash`` link each event to the previous one of its chain.
    """

    id = models.BigAutoField(primary_key=True)
    chain = models.CharField(max_length=64)
    seq = models.BigIntegerField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    occurred_at = models.DateTimeField()
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Plain ids, not foreign keys: an audit row must outlive and never cascade from the
    # principal or key it names. Nullable strings on purpose: None ("does not apply")
    # and "" are different values in the hashed canonical record.
    actor_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    actor_name = models.CharField(max_length=200)
    auth_method = models.CharField(max_length=16)
    key_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    source_ip = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    user_agent = models.CharField(max_length=300, blank=True)
    request_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    changes = models.JSONField(default=dict, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "seq"], name="audit_event_unique_chain_seq")
        ]
        indexes = [
            models.Index(fields=["tenant", "occurred_at"]),
            models.Index(fields=["chain", "occurred_at"]),
            models.Index(fields=["action", "occurred_at"]),
            # The platform audit page's keyset order and each of its filters, and every
            # object's History (audit.event_pages): one index range scan per page.
            models.Index(fields=["-occurred_at", "-id"], name="audit_event_time_id_idx"),
            models.Index(
                fields=["target_type", "target_id", "-occurred_at"], name="audit_event_target_idx"
            ),
            models.Index(fields=["actor_name", "-occurred_at"], name="audit_event_actor_idx"),
            models.Index(fields=["outcome", "-occurred_at"], name="audit_event_outcome_idx"),
            # A filter joined with the tenant filter: a range scan of the pair, not a walk
            # of the action's (or outcome's) whole range in search of that tenant's rows.
            models.Index(
                fields=["tenant", "action", "-occurred_at"], name="audit_event_tenant_action_idx"
            ),
            models.Index(
                fields=["tenant", "outcome", "-occurred_at"], name="audit_event_tenant_outcome_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.chain}#{self.seq} {self.action} {self.outcome}"


class AuditChainHead(models.Model):
    """The latest (seq, hash) of each chain; its row lock serializes appends."""

    chain = models.CharField(max_length=64, primary_key=True)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.chain}@{self.seq}"


class ExportFormat(models.TextChoices):
    JSONL = "jsonl", "JSON Lines (canonical)"
    CSV = "csv", "CSV"
    OCSF = "ocsf", "OCSF API Activity (6003)"


class ExportStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


TERMINAL_EXPORT_STATUSES = frozenset({ExportStatus.SUCCEEDED, ExportStatus.FAILED})


class AuditExport(models.Model):
    """One request to export audit events into a signed bundle, processed by a task.

    ``tenant`` is the tenant whose chain is exported; it is null for a platform export
    (requested by a platform auditor over every chain, or one tenant's via ``filters``),
    which is why this tenant-owned-looking model allows a null tenant.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    requested_by_name = models.CharField(max_length=200)
    format = models.CharField(max_length=8, choices=ExportFormat.choices)
    #: ``ExportFilters.to_json()`` plus, for platform exports, ``tenant_id``/``tenant_slug``.
    filters = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=16, choices=ExportStatus.choices, default=ExportStatus.PENDING
    )
    total = models.BigIntegerField(null=True, blank=True)
    processed = models.BigIntegerField(default=0)
    records = models.BigIntegerField(null=True, blank=True)
    withheld = models.BigIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    file_name = models.CharField(max_length=200, blank=True)
    file_size = models.BigIntegerField(null=True, blank=True)
    file_sha256 = models.CharField(max_length=64, blank=True)
    manifest = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="audit_export_tenant_created")
        ]
        constraints = [
            # Platform exports (null tenant) are deduplicated under a lock on the
            # requesting principal instead: NULLs never collide in a unique index.
            models.UniqueConstraint(
                fields=["tenant", "requested_by", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="audit_export_unique_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.format}, {self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_EXPORT_STATUSES


class AuditDigest(models.Model):
    """A signed statement of one chain's head (seq, hash) made in one hour, chained to
    the chain's previous digest by ``prev_digest_hash`` (as CloudTrail's digest files).

    Append-only like the events (trigger in migration 0005). A later export or
    ``cacheplane audit verify-digests`` proves the chain was not rewritten since.
    """

    id = models.BigAutoField(primary_key=True)
    chain = models.CharField(max_length=64)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    number = models.PositiveIntegerField()
    hour = models.DateTimeField()
    head_seq = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    prev_digest_hash = models.CharField(max_length=64)
    digest_hash = models.CharField(max_length=64)
    key_id = models.CharField(max_length=64)
    signature = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "number"], name="audit_digest_unique_number"),
            models.UniqueConstraint(fields=["chain", "hour"], name="audit_digest_unique_hour"),
        ]
        indexes = [models.Index(fields=["tenant", "hour"], name="audit_digest_tenant_hour")]

    def __str__(self) -> str:
        return f"{self.chain} digest #{self.number} @{self.head_seq}"


class AuditSigningKey(models.Model):
    """A public key that signed (or signs) exports and digests; published for verifiers.

    The private half never enters the database: it comes from the environment (or, in
    development, a 0600 file). A new active key id retires the others (rotation); retired
    keys stay published so that older exports and digests keep verifying.
    """

    kid = models.CharField(max_length=64, primary_key=True)
    algorithm = models.CharField(max_length=16, default="Ed25519")
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kid} ({'retired' if self.retired_at else 'active'})"
