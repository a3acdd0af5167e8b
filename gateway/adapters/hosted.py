"""What the hosted-provider adapters (Anthropic, OpenAI, DeepSeek) share: the catalog of
their models, the tenant's credential, one POST through ``gateway.upstream`` and the
provider's error answers turned into the gateway's errors (status kept where it means the
same to the client).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from gateway import upstream
from gateway.adapters.base import Call, Target
from gateway.errors import GatewayError
from gateway.provider_credentials import credential_for


@dataclass(frozen=True)
class HostedModel:
    """What the gateway needs to know of a hosted model before sending to it."""

    provider: str
    name: str
    max_output_tokens: int  # the reservation's bound when a request sets none
    min_cache_tokens: int = 0  # Anthropic: a shorter prefix is not cached at all
    # Reasons before it answers and bills that reasoning without streaming it (OpenAI's
    # GPT-5 family): until the usage chunk, what was streamed does not say what it cost.
    hidden_reasoning: bool = False


#: Model cards of each provider (max output; Anthropic's minimum cacheable prompt:
#: 1,024 tokens for Sonnet 4.5 and Opus 4.1, 4,096 for Haiku 4.5 and Opus 4.5).
HOSTED_MODELS: dict[str, HostedModel] = {
    m.name: m
    for m in (
        HostedModel("anthropic", "claude-sonnet-4-5", 64_000, 1024),
        HostedModel("anthropic", "claude-haiku-4-5", 64_000, 4096),
        HostedModel("anthropic", "claude-opus-4-1", 32_000, 1024),
        HostedModel("anthropic", "claude-opus-4-5", 64_000, 4096),
        HostedModel("openai", "gpt-5", 128_000, hidden_reasoning=True),
        HostedModel("openai", "gpt-5-mini", 128_000, hidden_reasoning=True),
        HostedModel("openai", "gpt-4o", 16_384),
        HostedModel("openai", "gpt-4o-mini", 16_384),
        HostedModel("openai", "gpt-4o-audio-preview", 16_384),
        HostedModel("deepseek", "deepseek-chat", 8_192),
        HostedModel("deepseek", "deepseek-reasoner", 65_536),
    )
}


def hosted_model(call: Call) -> HostedModel:
    return HOSTED_MODELS[call.model]


def base_url(provider: str) -> str:
    return str(getattr(settings, f"CACHEPLANE_{provider.upper()}_BASE_URL"))


async def hosted_target(call: Call, provider: str) -> Target:
    """The tenant's credential for ``provider`` (400 when it has none) as the target."""
    found = await credential_for(call.identity.tenant_id, provider)
    if found is None:
        raise GatewayError(
            400,
            "provider_not_configured",
            f"This tenant has no {provider} API key; an admin sets one under "
            f"/api/v1/tenants/<tenant>/provider-credentials/{provider}.",
            param="model",
        )
    if found.secret is None:
        raise GatewayError(
            502,
            "upstream_auth_failed",
            f"The tenant's {provider} API key cannot be opened with the configured keys; "
            "set it again.",
        )
    return Target(
        pool="",
        share_key=f"{provider}:{call.model}",
        capacity=settings.CACHEPLANE_GATEWAY_HOSTED_CONCURRENCY,
        state=found,
    )


_LABEL = {"anthropic": "Anthropic", "openai": "OpenAI", "deepseek": "DeepSeek"}


async def post(
    provider: str, url: str, body: dict[str, Any], headers: dict[str, str]
) -> upstream.Response:
    """POST, a 200 back; anything else raises the mapped :class:`GatewayError`."""
    label = _LABEL[provider]
    timeout = settings.CACHEPLANE_GATEWAY_UPSTREAM_TIMEOUT_SECONDS
    try:
        response = await upstream.post(url, json=body, headers=headers)
    except upstream.UpstreamTimeout:
        raise GatewayError(
            504, "upstream_timeout", f"{label} did not answer within {timeout:g} s."
        ) from None
    except upstream.UpstreamError as exc:
        raise GatewayError(502, "upstream_error", f"{label} unreachable: {exc}") from None
    if response.status_code == 200:
        return response
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
    raise error_from(provider, response.status_code, raw, response.headers)


def error_from(provider: str, status: int, raw: bytes, headers: Any) -> GatewayError:
    """A provider's error answer as the gateway's (its message kept, its key never)."""
    label = _LABEL[provider]
    try:
        parsed = json.loads(raw)
        error = parsed.get("error") if isinstance(parsed, dict) else None
        message = str(error.get("message", "")) if isinstance(error, dict) else ""
    except ValueError:
        message = ""
    message = message or raw[:200].decode(errors="replace") or f"HTTP {status}"
    kept = relayed_error_headers(headers)
    said = f"{label} {status}: {message}"
    if status == 429:
        return GatewayError(429, "upstream_rate_limited", said, headers=kept)
    if status in (400, 404, 413, 422):
        return GatewayError(400 if status != 413 else 413, "upstream_rejected", said)
    if status in (401, 403):
        return GatewayError(
            502, "upstream_auth_failed", f"{label} refused the tenant's API key: {message}"
        )
    if status in (503, 529):  # 529: Anthropic "overloaded_error"
        return GatewayError(503, "upstream_unavailable", said, headers=kept)
    if status == 504:
        return GatewayError(504, "upstream_timeout", said)
    return GatewayError(502, "upstream_error", said)


def relayed_error_headers(headers: Any) -> dict[str, str]:
    """What a client needs of a provider's error answer: ``retry-after`` (once: the
    upstream's headers are case-insensitive, a second spelling would repeat it, and
    ``3, 3`` is no delay the SDKs can read) and Anthropic's ``anthropic-ratelimit-*``
    (relayed on a success too). OpenAI's ``x-ratelimit-*`` are not: that name is the
    gateway's own headers' (the tenant's limits at Cacheplane)."""
    if headers is None:
        return {}
    kept: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "retry-after" or lowered.startswith("anthropic-ratelimit-"):
            kept.setdefault(lowered, value)
    return kept


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    data = json.dumps(payload, separators=(",", ":")).encode()
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + data + b"\n\n"
