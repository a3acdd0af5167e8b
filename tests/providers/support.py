"""Helpers of the hosted-provider tests: SDK clients of the gateway, the ledger row."""

from __future__ import annotations

import uuid

import anthropic
import openai

from tests.gateway.support import usage_row_once_booked


def anthropic_client(url: str, key: str) -> anthropic.Anthropic:
    """The official Anthropic SDK pointed at Cacheplane (its key sent as ``x-api-key``)."""
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def openai_client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def new_request_id() -> str:
    return f"test-{uuid.uuid4().hex[:16]}"


def booked(request_id: str):
    return usage_row_once_booked(request_id)


def D(n: int) -> str:  # noqa: N802 (reads as the token count it stands for)
    """A text of exactly ``n`` tokens for the local servers (4 characters a token)."""
    return "abcd" * n
