"""The deployment's audit signing key: load it, register its public half, rotate.

The private key comes from ``CACHEPLANE_AUDIT_SIGNING_KEY`` (+ ``_KEY_ID``). In
development, when unset, one is generated once under ``CACHEPLANE_DATA_DIR`` in a file
created 0600; production refuses to sign without a configured key (a key generated on
one pod's disk would differ per replica and vanish with it). The key is never logged.

Rotation: configure a new key id. The first signature with it registers its public key
and retires every other key; retired keys stay published so old exports still verify.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.errors import SigningKeyConflict, SigningKeyMissing
from audit.models import AuditSigningKey
from audit.services import audit_record
from audit.signing import (
    ALGORITHM,
    Signer,
    private_key_generate,
    private_key_load,
    private_key_pem,
    public_key_fingerprint,
    public_key_pem,
)
from audit.snapshot import EMPTY, diff, model_snapshot
from tenants.actor import Actor

logger = logging.getLogger(__name__)

DEV_KEY_FILE = "audit-signing-key.pem"
_signers: dict[tuple[str, str, str], Signer] = {}
_signers_lock = threading.Lock()


def signing_key_active(*, create: bool = True) -> Signer | None:
    """The signer for new exports and digests (cached per configuration).

    In development without a configured key, ``create=False`` returns None instead of
    generating the key file (reads must not write). Raises SigningKeyMissing in
    production when no key is configured.
    """
    raw = settings.CACHEPLANE_AUDIT_SIGNING_KEY
    kid = settings.CACHEPLANE_AUDIT_SIGNING_KEY_ID
    data_dir = str(settings.CACHEPLANE_DATA_DIR)
    # Cache by a digest of the key, so a changed setting (tests, reload) is picked up.
    cache_key = (hashlib.sha256(raw.encode()).hexdigest(), kid, "" if raw else data_dir)
    with _signers_lock:
        signer = _signers.get(cache_key)
        if signer is None:
            if raw:
                signer = Signer(kid=kid, private_key=private_key_load(raw))
            elif getattr(settings, "PRODUCTION", False):
                raise SigningKeyMissing(
                    "No audit signing key is configured: set CACHEPLANE_AUDIT_SIGNING_KEY "
                    "and CACHEPLANE_AUDIT_SIGNING_KEY_ID."
                )
            elif not create and not (Path(data_dir) / DEV_KEY_FILE).exists():
                return None
            else:
                signer = _development_signer(Path(data_dir))
            _signers[cache_key] = signer
    return signer


def _development_signer(data_dir: Path) -> Signer:
    """Read, or create once (0600, exclusive create: concurrent processes agree), the
    development key under the data dir; its id is derived from the public key."""
    path = data_dir / DEV_KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = private_key_load(path.read_text(encoding="ascii"))
    else:
        key = private_key_generate()
        with os.fdopen(fd, "wb") as handle:
            handle.write(private_key_pem(key))
        logger.info("generated a development audit signing key", extra={"path": str(path)})
    fingerprint = public_key_fingerprint(key.public_key())
    return Signer(kid=f"dev-{fingerprint[:16]}", private_key=key)


def audit_signing_key_register() -> Signer:
    """Make sure the active key's public half is registered (and published); on first
    sight of a new key id, retire every other key and audit the rotation.

    Raises SigningKeyMissing, or SigningKeyConflict when the key id is already
    registered with another public key (a reused id would make old exports ambiguous).
    """
    signer = signing_key_active()
    if signer is None:  # unreachable with create=True; keeps the type honest
        raise SigningKeyMissing("No audit signing key is available.")
    existing = AuditSigningKey.objects.filter(kid=signer.kid).first()
    if existing is not None:
        _same_key_or_raise(existing, signer)
        return signer
    try:
        with transaction.atomic():
            registered = AuditSigningKey.objects.create(
                kid=signer.kid,
                algorithm=ALGORITHM,
                public_key=public_key_pem(signer.public_key),
                fingerprint=signer.fingerprint,
            )
            retired = list(
                AuditSigningKey.objects.exclude(kid=signer.kid)
                .filter(retired_at__isnull=True)
                .values_list("kid", flat=True)
            )
            AuditSigningKey.objects.filter(kid__in=retired).update(retired_at=timezone.now())
            audit_record(
                actor=Actor.system("audit-signing"),
                action="audit.signing_key.register",
                tenant=None,
                target_type="audit_signing_key",
                target_id=signer.kid,
                changes=diff(EMPTY, model_snapshot(registered)),
                details={"fingerprint": signer.fingerprint, "retired": retired},
            )
    except IntegrityError:
        # Another process registered the same id first; it must be the same key.
        _same_key_or_raise(AuditSigningKey.objects.get(kid=signer.kid), signer)
    return signer


def _same_key_or_raise(row: AuditSigningKey, signer: Signer) -> None:
    if row.fingerprint != signer.fingerprint:
        raise SigningKeyConflict(
            f"The audit signing key id {signer.kid!r} is already registered with another "
            "public key; give the new key a new id."
        )
