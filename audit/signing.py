"""Ed25519 keys and signatures for audit exports and digests, free of Django.

The offline verifier (``audit/verify/``) and the settings module import this, so it
must not import Django. Private keys come in as PEM (PKCS#8) or as the base64 of the 32
raw bytes; public keys go out as PEM (SubjectPublicKeyInfo) and are named by a key id
(``kid``) plus the SHA-256 of their raw 32 bytes (the fingerprint a reviewer compares).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "Ed25519"


class KeyFormatError(ValueError):
    """A key could not be parsed; the message never contains key material."""


def private_key_load(raw: str) -> Ed25519PrivateKey:
    """Parse a private key given as PEM or as base64 of the 32 raw bytes."""
    text = raw.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
        except (ValueError, TypeError, UnicodeEncodeError):
            raise KeyFormatError("not a readable unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFormatError("the PEM key is not an Ed25519 private key")
        return key
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError("expected PEM or the base64 of 32 raw key bytes") from None
    if len(data) != 32:
        raise KeyFormatError(f"expected 32 raw key bytes, got {len(data)}")
    return Ed25519PrivateKey.from_private_bytes(data)


def private_key_generate() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (the file holding it is created 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def public_key_fingerprint(key: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the 32 raw public key bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_load(text: str) -> Ed25519PublicKey:
    """Parse a public key given as PEM or as base64 of the 32 raw bytes."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, TypeError, UnicodeEncodeError):
            raise KeyFormatError("not a readable PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFormatError("the PEM key is not an Ed25519 public key")
        return key
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError("expected PEM or the base64 of 32 raw public key bytes") from None
    if len(data) != 32:
        raise KeyFormatError(f"expected 32 raw public key bytes, got {len(data)}")
    return Ed25519PublicKey.from_public_bytes(data)


def sign(key: Ed25519PrivateKey, payload: bytes) -> str:
    """The base64 Ed25519 signature of ``payload``."""
    return base64.b64encode(key.sign(payload)).decode("ascii")


def signature_valid(key: Ed25519PublicKey, payload: bytes, signature: object) -> bool:
    """Whether ``signature`` (base64 text) is ``key``'s signature of ``payload``."""
    if not isinstance(signature, str):
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
        key.verify(raw, payload)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class Signer:
    """The deployment's active signing key and its id."""

    kid: str
    private_key: Ed25519PrivateKey = field(repr=False)

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def fingerprint(self) -> str:
        return public_key_fingerprint(self.public_key)

    def sign(self, payload: bytes) -> str:
        return sign(self.private_key, payload)


@dataclass
class KeySet:
    """Public keys a verifier trusts: by key id, plus at most one key given without an id
    (a bare PEM file), which is matched by fingerprint."""

    by_kid: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    anonymous: Ed25519PublicKey | None = None

    def find(self, kid: object, fingerprint: object = None) -> Ed25519PublicKey | None:
        """The key named ``kid``; a bare key only if its fingerprint is the one named."""
        if isinstance(kid, str) and kid in self.by_kid:
            key = self.by_kid[kid]
            if fingerprint is not None and public_key_fingerprint(key) != fingerprint:
                return None
            return key
        if self.anonymous is not None and public_key_fingerprint(self.anonymous) == fingerprint:
            return self.anonymous
        return None

    def describe(self) -> str:
        names = [f"{kid} ({public_key_fingerprint(k)[:16]}…)" for kid, k in self.by_kid.items()]
        if self.anonymous is not None:
            names.append(f"a key without id ({public_key_fingerprint(self.anonymous)[:16]}…)")
        return ", ".join(names) or "none"

    def __len__(self) -> int:
        return len(self.by_kid) + (1 if self.anonymous is not None else 0)


def keyset_parse(text: str) -> KeySet:
    """Parse what ``--public-key`` points at: one PEM (or base64) key, the JSON answer of
    ``GET /api/v1/audit/signing-keys`` (``{"keys": [{"kid", "public_key"}, ...]}``), or a
    JSON object ``{kid: pem}``. Raises KeyFormatError."""
    stripped = text.strip()
    if not stripped:
        raise KeyFormatError("the public key file is empty")
    if not stripped.startswith("{"):
        return KeySet(anonymous=public_key_load(stripped))
    try:
        document = json.loads(stripped)
    except json.JSONDecodeError:
        raise KeyFormatError("the public key file is neither PEM nor JSON") from None
    entries: list[tuple[object, object]]
    if isinstance(document.get("keys"), list):
        entries = [
            (item.get("kid"), item.get("public_key"))
            for item in document["keys"]
            if isinstance(item, dict)
        ]
    else:
        entries = list(document.items())
    keys = KeySet()
    for kid, pem in entries:
        if not isinstance(kid, str) or not isinstance(pem, str):
            raise KeyFormatError("every key needs a string kid and a PEM public_key")
        keys.by_kid[kid] = public_key_load(pem)
    if not keys.by_kid:
        raise KeyFormatError("the key set holds no keys")
    return keys
