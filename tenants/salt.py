"""The per-tenant vLLM ``cache_salt``.

HMAC-SHA256 under the deployment secret of (tenant id, salt version, tenant salt
secret), base64url without padding (43 characters, the ~256 bits vLLM's docs suggest).
Only the control plane can compute it, so a client can never present another tenant's
salt; rotating the tenant's salt (new version and secret) changes it, which makes every
prefix block the tenant holds on any worker unreachable at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.conf import settings

from tenants.models import Tenant


def tenant_cache_salt(tenant: Tenant) -> str:
    """The salt the gateway and the cache warmer send as ``cache_salt`` for ``tenant``."""
    key = hashlib.sha256(f"cacheplane.cache-salt.v1:{settings.SECRET_KEY}".encode()).digest()
    message = f"{tenant.pk}|{tenant.cache_salt_version}|{tenant.cache_salt_secret}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
