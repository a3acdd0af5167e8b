"""API-key (Bearer) authentication for DRF: an adapter over ``tenants.authentication``."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from tenants.authentication import api_key_authenticate_at, http_source
from tenants.errors import ApiKeyRejected
from tenants.models import ApiKey, Principal


class ApiKeyAuthFailed(exceptions.AuthenticationFailed):
    """401 carrying the stable code of the rejection (``invalid_api_key``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = code


class TenantSuspendedError(exceptions.PermissionDenied):
    error_code = "tenant_suspended"


class ApiKeyAuthentication(BaseAuthentication):
    """``Authorization: Bearer cpk_...``; sets request.user to the key's principal and
    request.auth to the ApiKey (its tenant bounds what it may touch)."""

    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[Principal, ApiKey] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        if len(header) != 2:
            raise ApiKeyAuthFailed(
                "invalid_api_key", "Authorization header must be 'Bearer <key>'."
            )
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise ApiKeyAuthFailed("invalid_api_key", "The API key is malformed.") from None
        try:
            authenticated = api_key_authenticate_at(
                token=token, source=http_source(request._request), entry_point="api"
            )
        except ApiKeyRejected as rejected:  # audited by api_key_authenticate_at
            if rejected.code == "tenant_suspended":
                raise TenantSuspendedError(rejected.message) from None
            raise ApiKeyAuthFailed(rejected.code, rejected.message) from None
        return authenticated.principal, authenticated.key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="cacheplane"'


try:  # Documents the scheme in the OpenAPI schema.
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
        target_class = "controlplane.api.authentication.ApiKeyAuthentication"
        name = "apiKey"

        def get_security_definition(self, auto_schema: object) -> dict[str, str]:
            return {
                "type": "http",
                "scheme": "bearer",
                "description": "A Cacheplane API key: `Authorization: Bearer cpk_...`.",
            }
except ImportError:  # pragma: no cover - drf-spectacular is a hard dependency
    pass
