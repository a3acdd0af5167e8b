"""Secrets inside values: what is scrubbed from every string an audit row stores.

Field-level secrets are declared per model (``audit.registry``) and never reach here in
clear. This module handles secrets that hide *inside* otherwise legitimate values, by
looking at the value itself, never at the name of the field that holds it (a field called
``content_digest`` or ``kv_block_tokens`` holds real data and is stored as is):

- a URL's userinfo (``https://user:pass@host`` or ``https://TOKEN@host``);
- the values of token-, key-, secret- and signature-like parameters in a URL's query
  string or fragment (``?token=...``, ``&X-Amz-Signature=...``, ``#access_token=...``);
- the path of capability URLs on well-known webhook hosts (Slack, Discord, Teams...),
  where the path *is* the credential;
- a Cacheplane API key (``cpk_`` + 38 base62 characters) anywhere in a string.

What survives: scheme, host, port, the path of ordinary URLs, and every other parameter.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

# The format minted by ``tenants.services.keys.key_generate``: ``cpk_`` + 32 random and 6
# checksum base62 characters (tests/audit/test_redaction.py keeps the two in step).
_API_KEY = re.compile(r"(?<![0-9A-Za-z_])cpk_[0-9A-Za-z]{38}(?![0-9A-Za-z])")

# An absolute URL inside any text: a scheme, "://", then up to whitespace or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{1,15}://[^\s\"'<>`]+")

# RFC 3986, appendix B: scheme, authority, path, query, fragment of an absolute URL.
_URL_PARTS = re.compile(
    r"^(?P<scheme>[^:/?#]+)://(?P<authority>[^/?#]*)(?P<path>[^?#]*)"
    r"(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?$",
    re.DOTALL,
)

# A parameter is secret-like when its lowercased name contains one of these words.
# Matching names here is deliberate and bounded: it applies to URL parameters only, where
# these words mean credentials (``token``, ``api_key``, ``X-Amz-Signature``, ``sig``...).
_SECRET_PARAM_WORDS = (
    "token",
    "key",
    "secret",
    "signature",
    "sig",
    "password",
    "passwd",
    "pwd",
    "auth",
    "credential",
    "session",
    "jwt",
    "hmac",
    "code",
)

# Hosts whose webhook URLs carry the credential in the path (capability URLs): the path
# is redacted entirely, the host is kept so the destination stays visible.
_CAPABILITY_HOSTS = (
    "hooks.slack.com",
    "discord.com",
    "discordapp.com",
    "webhook.office.com",
    "hooks.zapier.com",
    "maker.ifttt.com",
    "chat.googleapis.com",
    "events.pagerduty.com",
)


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_PARAM_WORDS)


def _scrub_params(text: str) -> str:
    """``a=1&token=x`` → ``a=1&token=[redacted]`` (other parameters kept verbatim)."""
    parts = []
    for part in text.split("&"):
        name, sep, value = part.partition("=")
        parts.append(f"{name}={REDACTED}" if sep and value and _secret_param(name) else part)
    return "&".join(parts)


def _capability_host(host: str) -> bool:
    return any(host == h or host.endswith(f".{h}") for h in _CAPABILITY_HOSTS)


def scrub_url(url: str) -> str:
    """The URL with its userinfo, secret parameters and capability path redacted.

    Parsed with RFC 3986's own regular expression (appendix B), not ``urlsplit``: it
    accepts anything, so a malformed URL is scrubbed rather than skipped, and scrubbing an
    already scrubbed URL changes nothing.
    """
    match = _URL_PARTS.match(url)
    if match is None:
        return url
    scheme, authority, path, query, fragment = match.group(
        "scheme", "authority", "path", "query", "fragment"
    )
    _, at, hostport = authority.rpartition("@")
    if at:
        authority = f"{REDACTED}@{hostport}"
    host = hostport.lower()
    host = host[1 : host.find("]")] if host.startswith("[") else host.partition(":")[0]
    if _capability_host(host) and path not in ("", "/"):
        path = f"/{REDACTED}"
    rebuilt = f"{scheme}://{authority}{path}"
    if query is not None:
        rebuilt += "?" + _scrub_params(query)
    if fragment is not None:
        rebuilt += "#" + (_scrub_params(fragment) if "=" in fragment else fragment)
    return rebuilt


def scrub_text(text: str) -> str:
    """Every URL and API key inside ``text`` scrubbed; everything else unchanged."""
    if "://" in text:
        text = _URL.sub(lambda match: scrub_url(match.group(0)), text)
    if "cpk_" in text:
        text = _API_KEY.sub(f"cpk_{REDACTED}", text)
    return text


def scrub(value: Any) -> Any:
    """Scrub secrets inside a JSON-shaped value (dicts, lists and strings, recursively)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    return value
