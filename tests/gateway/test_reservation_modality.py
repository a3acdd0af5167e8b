"""Reservations bound what a request can spend per modality (issue #23, What to build 2):
a request that asks for spoken output is reserved at the audio output rate."""

from __future__ import annotations

from decimal import Decimal as D
from types import SimpleNamespace

import pytest

from billing.pricing import TokenRates, UsageCounts, token_cost
from gateway import pricing

# OpenAI gpt-4o-audio-preview (USD per 1M tokens): text in 2.50, text out 10.00,
# audio in 40.00, audio out 80.00.
AUDIO_PREVIEW = TokenRates(
    input=D("2.50"),
    cached_input=D("2.50"),
    cache_write_5m=D("2.50"),
    cache_write_1h=D("2.50"),
    output=D("10.00"),
    audio_input=D("40.00"),
    audio_output=D("80.00"),
)
RATES: pricing.Rates = (token_cost, AUDIO_PREVIEW)


@pytest.mark.parametrize(
    ("body", "audio"),
    [
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, True),
        ({"modalities": ["text", "audio"]}, True),
        ({"modalities": ["TEXT", "AUDIO"]}, True),
        ({"audio": {"voice": "alloy", "format": "wav"}}, True),
        ({"modalities": ["text"]}, False),
        ({}, False),
        ({"modalities": "audio-ish", "audio": None}, False),
    ],
)
def test_a_request_asking_for_spoken_output_may_be_billed_as_audio(body, audio) -> None:
    assert pricing.output_may_be_audio(body) is audio


def test_spoken_output_is_reserved_at_the_audio_output_rate() -> None:
    text = pricing.upper_bound_micros(RATES, prompt_tokens=1_000, max_output_tokens=2_000)
    spoken = pricing.upper_bound_micros(
        RATES, prompt_tokens=1_000, max_output_tokens=2_000, audio_output=True
    )
    assert text == 1_000 * 2.5 + 2_000 * 10  # µ$: 22,500
    assert spoken == 1_000 * 2.5 + 2_000 * 80  # µ$: 162,500 (7.2x the text bound)
    # What the request is then billed at most (all its output spoken) fits the hold.
    billed = token_cost(
        UsageCounts(prompt_tokens=1_000, audio_output_tokens=2_000), AUDIO_PREVIEW
    ).micros
    assert billed == spoken


def test_a_model_without_an_audio_rate_is_reserved_at_its_text_rate() -> None:
    rates = (token_cost, TokenRates(D("1"), D("0.1"), D("1.25"), D("2"), D("4")))
    assert pricing.upper_bound_micros(
        rates, prompt_tokens=100, max_output_tokens=100, audio_output=True
    ) == pricing.upper_bound_micros(rates, prompt_tokens=100, max_output_tokens=100)


@pytest.mark.asyncio
async def test_the_pipeline_holds_the_audio_bound_for_a_spoken_request(monkeypatch) -> None:
    from gateway import budget, limits, pipeline, ratelimit
    from gateway.books import Books

    held: list[int | None] = []

    async def rates(provider, model, pool):
        return RATES

    async def plan(identity, *, amount_micros, **kwargs):
        held.append(amount_micros)

    async def nothing(*args, **kwargs):
        return None

    monkeypatch.setattr(pricing, "rates", rates)
    monkeypatch.setattr(budget, "plan", plan)
    monkeypatch.setattr(ratelimit, "plan", nothing)
    monkeypatch.setattr(limits, "admit", nothing)
    for body in ({"modalities": ["text", "audio"]}, {}):
        call = SimpleNamespace(
            body=body,
            model="gpt-4o-audio-preview",
            identity=SimpleNamespace(tenant_id="t", key_id="k"),
            request_id="r",
            ledger_key="l",
            prompt_tokens_bound=1_000,
            audio_prompt_tokens_bound=0,
            max_output_tokens=2_000,
            estimated_tokens=3_000,
            output_unbounded=False,
        )
        books = Books()
        await pipeline._price_and_admit(books, call, "openai", "")  # type: ignore[arg-type]
        # A timed-out request's estimate is the same bound.
        books.hold = None
        assert books._reserved_micros(call) == held[-1]  # type: ignore[arg-type]
    assert held == [162_500, 22_500]


def test_an_audio_prompt_is_reserved_at_the_audio_input_rate() -> None:
    """1,000 prompt tokens of which 800 may be audio ($40/M, 16x text): the hold covers the
    audio part at its rate, so a bill for that prompt never exceeds it."""
    text = pricing.upper_bound_micros(RATES, prompt_tokens=1_000, max_output_tokens=100)
    heard = pricing.upper_bound_micros(
        RATES, prompt_tokens=1_000, max_output_tokens=100, audio_prompt_tokens=800
    )
    assert text == 1_000 * 2.5 + 100 * 10  # µ$: 3,500
    assert heard == 200 * 2.5 + 800 * 40 + 100 * 10  # µ$: 33,500
    billed = token_cost(
        UsageCounts(prompt_tokens=1_000, audio_prompt_tokens=800, output_tokens=100),
        AUDIO_PREVIEW,
    ).micros
    assert billed <= heard
    # An audio estimate above the prompt bound is clipped to it (all of it audio).
    assert (
        pricing.upper_bound_micros(
            RATES, prompt_tokens=1_000, max_output_tokens=0, audio_prompt_tokens=5_000
        )
        == 1_000 * 40
    )
