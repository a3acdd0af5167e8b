"""Tenants' provider API keys at rest: sealed with MultiFernet, keys from settings.

``CACHEPLANE_PROVIDER_CREDENTIAL_KEYS`` lists Fernet keys newest first: the first seals,
any opens, so rotating the encryption key is "add a key in front, reseal, drop the old
one" (:func:`reseal`). Without the setting, one key is derived from the deployment
secret (development). A sealed key that no configured key opens reads as None: the
gateway then answers ``502 upstream_auth_failed`` naming the provider, never the key.
Nothing here logs a key.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_INFO = b"cacheplane.gateway.provider_credential.v1"


def _fernet() -> MultiFernet:
    configured = [k.strip() for k in settings.CACHEPLANE_PROVIDER_CREDENTIAL_KEYS.split(",")]
    keys = [Fernet(k.encode()) for k in configured if k]
    if not keys:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
            str(settings.SECRET_KEY).encode()
        )
        keys = [Fernet(base64.urlsafe_b64encode(derived))]
    return MultiFernet(keys)


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str | None:
    """The secret, or None when no configured key opens it."""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return None


def reseal(sealed: str) -> str:
    """``sealed`` under the newest key (raises InvalidToken when none opens it)."""
    return _fernet().rotate(sealed.encode()).decode()


def fingerprint(secret: str) -> str:
    """Tells two keys apart without revealing either (12 hex digits of SHA-256)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]
