"""Identity settings: single sign-on (OpenID Connect) and local passwords (docs/identity.md).

SSO is on when ``CACHEPLANE_OIDC_ISSUER`` is set; the provider's endpoints and keys come
from its discovery document (``<issuer>/.well-known/openid-configuration``), whose
``issuer`` must equal the configured one exactly.
"""

from __future__ import annotations

import ipaddress

from controlplane.env import ConfigError, env_bool, env_int, env_list, env_str

CACHEPLANE_OIDC_ISSUER = env_str("CACHEPLANE_OIDC_ISSUER", "")
CACHEPLANE_OIDC_CLIENT_ID = env_str("CACHEPLANE_OIDC_CLIENT_ID", "")
CACHEPLANE_OIDC_CLIENT_SECRET = env_str("CACHEPLANE_OIDC_CLIENT_SECRET", "")
CACHEPLANE_OIDC_SCOPES = env_str("CACHEPLANE_OIDC_SCOPES", "openid email profile groups")
CACHEPLANE_OIDC_PKCE = env_bool("CACHEPLANE_OIDC_PKCE", True)
CACHEPLANE_OIDC_GROUPS_CLAIM = env_str("CACHEPLANE_OIDC_GROUPS_CLAIM", "groups")
CACHEPLANE_OIDC_USERNAME_CLAIM = env_str("CACHEPLANE_OIDC_USERNAME_CLAIM", "preferred_username")
CACHEPLANE_OIDC_PROVIDER_NAME = env_str("CACHEPLANE_OIDC_PROVIDER_NAME", "single sign-on")
# Tolerated clock difference with the provider when checking exp / iat of ID tokens.
CACHEPLANE_OIDC_CLOCK_SKEW_SECONDS = env_int("CACHEPLANE_OIDC_CLOCK_SKEW_SECONDS", 60, minimum=0)
if CACHEPLANE_OIDC_ISSUER and not CACHEPLANE_OIDC_CLIENT_ID:
    raise ConfigError("CACHEPLANE_OIDC_CLIENT_ID", "is required when CACHEPLANE_OIDC_ISSUER is set")
if "openid" not in CACHEPLANE_OIDC_SCOPES.split():
    raise ConfigError("CACHEPLANE_OIDC_SCOPES", "must include 'openid'")
# Break-glass local passwords; a deployment that signs in through its IdP only sets false.
CACHEPLANE_PASSWORD_LOGIN = env_bool("CACHEPLANE_PASSWORD_LOGIN", True)

# Failed password logins from one source (any usernames) before that source is locked
# out of password sign-in for CACHEPLANE_LOGIN_LOCKOUT_SECONDS (tenants.services.failures).
CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT = env_int(
    "CACHEPLANE_LOGIN_SOURCE_FAILURE_LIMIT", 20, minimum=1
)

# Proxies whose X-Forwarded-For is believed (CIDRs or addresses; default none): the client
# address of throttles and audit rows is the right-most forwarded hop that is not one of
# them (tenants.authentication). `cacheplane up` hands the same list to uvicorn's
# --forwarded-allow-ips.
CACHEPLANE_TRUSTED_PROXIES = env_list("CACHEPLANE_TRUSTED_PROXIES", [])
for _entry in CACHEPLANE_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_entry, strict=False)
    except ValueError:
        raise ConfigError(
            "CACHEPLANE_TRUSTED_PROXIES", f"{_entry!r} is not an IP address or network"
        ) from None

# Outgoing mail for invitations and password resets. No host: development prints mails
# to the console log; set the host (and credentials) to send them.
CACHEPLANE_EMAIL_HOST = env_str("CACHEPLANE_EMAIL_HOST", "")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if CACHEPLANE_EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_HOST = CACHEPLANE_EMAIL_HOST or "localhost"
EMAIL_PORT = env_int("CACHEPLANE_EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = env_str("CACHEPLANE_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_str("CACHEPLANE_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("CACHEPLANE_EMAIL_TLS", True)
DEFAULT_FROM_EMAIL = env_str("CACHEPLANE_EMAIL_FROM", "cacheplane@localhost")
# Invitation and password-reset links: single use (the token covers the password hash and
# last login) and valid this long.
PASSWORD_RESET_TIMEOUT = env_int("CACHEPLANE_INVITE_LINK_SECONDS", 72 * 3600, minimum=300)

# SCIM 2.0 provisioning (django-scim2, /scim/v2/): the IdP authenticates with a SCIM
# token made by a platform admin (POST /api/v1/platform/scim-tokens, shown once);
# identity.scim resolves it. Locations in SCIM answers use this public host.
SCIM_SERVICE_PROVIDER = {
    "NETLOC": env_str("CACHEPLANE_SCIM_NETLOC", "localhost"),
    "SCHEME": env_str("CACHEPLANE_SCIM_SCHEME", "https"),
    "USER_ADAPTER": "identity.scim.ScimUserAdapter",
    "GROUP_MODEL": "identity.models.ScimGroup",
    "GROUP_ADAPTER": "identity.scim.ScimGroupAdapter",
    "USER_FILTER_PARSER": "identity.scim_filters.UserFilter",
    "GROUP_FILTER_PARSER": "identity.scim_filters.GroupFilter",
    "GET_EXTRA_MODEL_FILTER_KWARGS_GETTER": "identity.scim.extra_filter_kwargs",
    "AUTHENTICATION_SCHEMES": [
        {
            "type": "oauthbearertoken",
            "name": "SCIM bearer token",
            "description": "A token made by a platform admin (docs/identity.md#scim).",
        }
    ],
    "WWW_AUTHENTICATE_HEADER": 'Bearer realm="cacheplane-scim"',
}
