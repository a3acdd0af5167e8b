"""Worker API keys at rest: sealed with Fernet under a key derived from the deployment secret.

A worker's ``--api-key`` is a credential the control plane must present (the gateway and
the cache provider send it as ``Authorization: Bearer``), so it cannot be a one-way digest
like our own API keys. It is stored sealed (``Worker.api_key_sealed``), declared sensitive
to the audit log, never serialized, never logged. Rotating ``CACHEPLANE_SECRET_KEY`` makes
sealed keys unreadable: :func:`unseal` then answers ``None`` and the worker is called
without a key (it answers 401, and the probe says so) until it is registered again.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_INFO = b"cacheplane.workers.api_key.v1"


def _fernet() -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        str(settings.SECRET_KEY).encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def seal(api_key: str) -> str:
    """The sealed form of ``api_key`` ("" stays "": no key)."""
    return _fernet().encrypt(api_key.encode()).decode() if api_key else ""


def unseal(sealed: str) -> str | None:
    """The key sealed in ``sealed``; None when there is none or it no longer opens."""
    if not sealed:
        return None
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return None
