"""Fixtures of the hosted-provider suite: the local Anthropic, OpenAI and DeepSeek
servers (``tests.servers``), a tenant with its provider keys set through the service,
and the price book's published rates for the models tested (transactional tests lose
the seeded price book)."""

from __future__ import annotations

import pytest

from tests.servers.anthropic_server import AnthropicServer
from tests.servers.common import serving
from tests.servers.openai_server import OpenAIServer

ANTHROPIC_KEY = "sk-ant-test-key"
OPENAI_KEY = "sk-test-openai-key"
DEEPSEEK_KEY = "sk-test-deepseek-key"

#: USD per 1M tokens, as billing's seed migrations publish them.
PRICES = {
    ("anthropic", "claude-sonnet-4-5"): {
        "input_per_mtok": "3.00",
        "cached_input_per_mtok": "0.30",
        "cache_write_5m_per_mtok": "3.75",
        "cache_write_1h_per_mtok": "6.00",
        "output_per_mtok": "15.00",
    },
    ("anthropic", "claude-haiku-4-5"): {
        "input_per_mtok": "1.00",
        "cached_input_per_mtok": "0.10",
        "cache_write_5m_per_mtok": "1.25",
        "cache_write_1h_per_mtok": "2.00",
        "output_per_mtok": "5.00",
    },
    ("openai", "gpt-5"): {
        "input_per_mtok": "1.25",
        "cached_input_per_mtok": "0.125",
        "output_per_mtok": "10.00",
    },
    ("openai", "gpt-4o"): {
        "input_per_mtok": "2.50",
        "cached_input_per_mtok": "1.25",
        "output_per_mtok": "10.00",
    },
    ("openai", "gpt-4o-audio-preview"): {
        "input_per_mtok": "2.50",
        "cached_input_per_mtok": "1.25",
        "output_per_mtok": "10.00",
        "audio_input_per_mtok": "40.00",
        "audio_output_per_mtok": "80.00",
    },
    ("deepseek", "deepseek-chat"): {
        "input_per_mtok": "0.27",
        "cached_input_per_mtok": "0.07",
        "output_per_mtok": "1.10",
    },
    ("deepseek", "deepseek-reasoner"): {
        "input_per_mtok": "0.55",
        "cached_input_per_mtok": "0.14",
        "output_per_mtok": "2.19",
    },
}


def set_price(provider: str, model: str, rates: dict) -> None:
    from billing.models import ModelPrice
    from billing.services.prices import model_price_create
    from gateway import pricing
    from tests.factories import actor_for

    ModelPrice.objects.filter(provider=provider, model=model).update(superseded_by=None)
    ModelPrice.objects.filter(provider=provider, model=model).delete()
    model_price_create(
        actor=actor_for(None), provider=provider, model=model, rates=rates, source="test"
    )
    pricing.forget()


@pytest.fixture
def hosted(tenant_keys, fresh_gateway, redis_flush, settings):
    """Tenant gw-acme with its Anthropic, OpenAI and DeepSeek keys set, the local servers
    running, the prices in the book; yields a dict of what the tests need."""
    from gateway.provider_credentials import forget, provider_credential_set
    from tests.factories import actor_for

    acme = tenant_keys["gw-acme"]
    for (provider, model), rates in PRICES.items():
        set_price(provider, model, rates)
    actor = actor_for(acme["admin"])
    for provider, key in (
        ("anthropic", ANTHROPIC_KEY),
        ("openai", OPENAI_KEY),
        ("deepseek", DEEPSEEK_KEY),
    ):
        provider_credential_set(tenant=acme["tenant"], actor=actor, provider=provider, secret=key)
    anthropic = AnthropicServer(api_keys={ANTHROPIC_KEY})
    openai = OpenAIServer(flavor="openai", api_keys={OPENAI_KEY})
    deepseek = OpenAIServer(flavor="deepseek", api_keys={DEEPSEEK_KEY})
    with (
        serving(anthropic.app) as a_url,
        serving(openai.app) as o_url,
        serving(deepseek.app) as d_url,
    ):
        settings.CACHEPLANE_ANTHROPIC_BASE_URL = a_url
        settings.CACHEPLANE_OPENAI_BASE_URL = f"{o_url}/v1"
        settings.CACHEPLANE_DEEPSEEK_BASE_URL = d_url
        yield {
            **acme,
            "anthropic": anthropic,
            "openai": openai,
            "deepseek": deepseek,
            "actor": actor,
        }
    forget()
