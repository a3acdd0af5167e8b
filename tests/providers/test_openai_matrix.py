"""OpenAI through Cacheplane, priced by hand: the official ``openai`` SDK against the
local OpenAI server (``tests.servers.openai_server``), every shape's ledger row checked.

n$ a token (USD per 1M tokens × 1,000): gpt-4o input 2,500, cached 1,250, output 10,000;
gpt-5 input 1,250, cached 125, output 10,000 (reasoning billed as output);
gpt-4o-audio-preview text as gpt-4o, audio input 40,000, audio output 80,000.
The server caches prompts of 1,024 tokens or more in 128-token blocks for 10 minutes;
gpt-5 reasons 0 / 16 / 64 / 256 tokens (minimal / low / medium by default / high).
The ledger's ``output_tokens`` is the text and reasoning output, audio apart.
"""

from __future__ import annotations

import openai
import pytest

from tests.providers.chat_matrix import autopilot_off, run_shape
from tests.providers.support import (
    D,
    assert_every_shape,
    booked,
    fresh_shape,
    new_request_id,
    openai_client,
)

D10 = D(10)
# One test sends every shape (one transactional database, each shape after fresh_shape):
# the three matrices take about a minute together, so they run in the plain suite.
pytestmark = pytest.mark.django_db(transaction=True)
ASK40 = [{"role": "user", "content": "reply with 40 tokens"}]  # 5 tokens


def _b(model="gpt-4o", content=D10, **more):
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return {"model": model, "messages": messages, **more}


def _sys(n, user=D10):
    return [{"role": "system", "content": D(n)}, {"role": "user", "content": user}]


def once(body, stream=False):
    return [(body, stream, 0, None)]


def twice(body, stream=False, advance=0):
    return [(body, False, 0, None), (body, stream, advance, None)]


LOOKUP = {  # compact JSON of 136 characters: 34 tokens
    "type": "function",
    "function": {"name": "lookup", "description": D(10), "parameters": {"type": "object"}},
}
AUDIO_IN = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": D(10)},
            {"type": "input_audio", "input_audio": {"data": "A" * 400, "format": "wav"}},
        ],
    }
]
HISTORY = [
    {"role": "user", "content": D(10)},
    {"role": "assistant", "content": "tok tok tok tok "},
    {"role": "user", "content": D(10)},
]

# name: (steps, (prompt, cached, audio prompt, output, audio output, cost n$), status)
SHAPES = {
    # 10 × 2,500 + 4 × 10,000 = 25,000 + 40,000
    "plain": (once(_b()), (10, 0, 0, 4, 0, 65_000), "ok"),
    # first sight of 2,000 tokens: 2,000 × 2,500 + 40,000
    "first_uncached": (once(_b(content=D(2000))), (2000, 0, 0, 4, 0, 5_040_000), "ok"),
    # 15 blocks of 128 = 1,920 cached: 80 × 2,500 = 200,000 + 1,920 × 1,250 = 2,400,000
    # + 40,000
    "cached_1920": (twice(_b(content=D(2000))), (2000, 1920, 0, 4, 0, 2_640_000), "ok"),
    # under 1,024 tokens nothing is cached: 1,000 × 2,500 + 40,000
    "below_1024": (twice(_b(content=D(1000))), (1000, 0, 0, 4, 0, 2_540_000), "ok"),
    # 1,023 tokens: 1,023 × 2,500 = 2,557,500 + 40,000
    "just_below_1024": (twice(_b(content=D(1023))), (1023, 0, 0, 4, 0, 2_597_500), "ok"),
    # exactly 1,024: 1,024 × 1,250 + 40,000
    "exactly_1024": (twice(_b(content=D(1024))), (1024, 1024, 0, 4, 0, 1_320_000), "ok"),
    # system 1,024 + user 10: 10 × 2,500 + 1,024 × 1,250 + 40,000
    "system_prefix": (twice(_b(content=_sys(1024))), (1034, 1024, 0, 4, 0, 1_345_000), "ok"),
    # the same system, another question: 11 blocks (1,408) in common:
    # 102 × 2,500 = 255,000 + 1,408 × 1,250 = 1,760,000 + 40,000
    "shared_prefix_new_question": (
        [
            (_b(content=_sys(1500)), False, 0, None),
            (_b(content=_sys(1500, user="wxyz" * 10)), False, 0, None),
        ],
        (1510, 1408, 0, 4, 0, 2_055_000),
        "ok",
    ),
    # 10 minutes later the prefix is gone: as first_uncached
    "lapsed": (twice(_b(content=D(2000)), advance=601), (2000, 0, 0, 4, 0, 5_040_000), "ok"),
    # another prompt_cache_key: another cache, as first_uncached
    "other_cache_key": (
        [
            (_b(content=D(2000), prompt_cache_key="a"), False, 0, None),
            (_b(content=D(2000), prompt_cache_key="b"), False, 0, None),
        ],
        (2000, 0, 0, 4, 0, 5_040_000),
        "ok",
    ),
    # the same prompt_cache_key: as cached_1920
    "same_cache_key": (
        twice(_b(content=D(2000), prompt_cache_key="a")),
        (2000, 1920, 0, 4, 0, 2_640_000),
        "ok",
    ),
    # a third request reads as the second did
    "third_read": (
        [*twice(_b(content=D(2000))), (_b(content=D(2000)), False, 0, None)],
        (2000, 1920, 0, 4, 0, 2_640_000),
        "ok",
    ),
    # gpt-5 medium: 10 × 1,250 = 12,500 + (64 + 4) × 10,000 = 680,000
    "gpt5_medium": (once(_b("gpt-5")), (10, 0, 0, 68, 0, 692_500), "ok"),
    # low: 12,500 + 20 × 10,000
    "gpt5_low": (once(_b("gpt-5", reasoning_effort="low")), (10, 0, 0, 20, 0, 212_500), "ok"),
    # high: 12,500 + 260 × 10,000
    "gpt5_high": (
        once(_b("gpt-5", reasoning_effort="high")),
        (10, 0, 0, 260, 0, 2_612_500),
        "ok",
    ),
    # minimal: 12,500 + 4 × 10,000
    "gpt5_minimal": (
        once(_b("gpt-5", reasoning_effort="minimal")),
        (10, 0, 0, 4, 0, 52_500),
        "ok",
    ),
    # 80 × 1,250 = 100,000 + 1,920 × 125 = 240,000 + 68 × 10,000
    "gpt5_cached": (twice(_b("gpt-5", content=D(2000))), (2000, 1920, 0, 68, 0, 1_020_000), "ok"),
    # the limit covers reasoning: 16 + 14 = 30 output; 5 × 1,250 = 6,250 + 300,000
    "gpt5_limit_covers_reasoning": (
        once(_b("gpt-5", content=ASK40, reasoning_effort="low", max_completion_tokens=30)),
        (5, 0, 0, 30, 0, 306_250),
        "ok",
    ),
    # 5 × 2,500 = 12,500 + 40 × 10,000
    "long_answer": (once(_b(content=ASK40)), (5, 0, 0, 40, 0, 412_500), "ok"),
    # capped at 10: 12,500 + 100,000
    "max_tokens_cap": (once(_b(content=ASK40, max_tokens=10)), (5, 0, 0, 10, 0, 112_500), "ok"),
    # three choices of 4: 25,000 + 12 × 10,000
    "three_choices": (once(_b(n=3)), (10, 0, 0, 12, 0, 145_000), "ok"),
    # sampling parameters pass through: as plain
    "sampling_parameters": (
        once(_b(temperature=0.2, top_p=0.9, seed=7, stop=["zz"], user="u1")),
        (10, 0, 0, 4, 0, 65_000),
        "ok",
    ),
    # a conversation of 10 + 4 + 10 tokens: 24 × 2,500 + 40,000
    "history": (once(_b(content=HISTORY)), (24, 0, 0, 4, 0, 100_000), "ok"),
    # a tool definition of 34 tokens: 44 × 2,500 + 40,000
    "tool_definition": (once(_b(tools=[LOOKUP])), (44, 0, 0, 4, 0, 150_000), "ok"),
    # streamed with include_usage: as plain
    "stream": (
        once(_b(stream_options={"include_usage": True}), True),
        (10, 0, 0, 4, 0, 65_000),
        "ok",
    ),
    # streamed without asking for usage (the gateway asks upstream): as plain
    "stream_no_usage_asked": (once(_b(), True), (10, 0, 0, 4, 0, 65_000), "ok"),
    # streamed read: as cached_1920
    "stream_cached": (twice(_b(content=D(2000)), True), (2000, 1920, 0, 4, 0, 2_640_000), "ok"),
    # streamed gpt-5: as gpt5_medium
    "stream_gpt5": (once(_b("gpt-5"), True), (10, 0, 0, 68, 0, 692_500), "ok"),
    # cut after 2 chunks: no usage chunk came, so the prompt's estimate (its 50 bytes of
    # JSON / 4 + 1 = 13) and the 2 tokens streamed: 13 × 2,500 = 32,500 + 20,000
    "stream_cut": (
        [(_b(content=ASK40), True, 0, 2)],
        (13, 0, 0, 2, 0, 52_500),
        "upstream_error",
    ),
    # 100 audio tokens (400 base64 characters): 10 × 2,500 = 25,000
    # + 100 × 40,000 = 4,000,000 + 40,000
    "audio_input": (
        once(_b("gpt-4o-audio-preview", content=AUDIO_IN)),
        (110, 0, 100, 4, 0, 4_065_000),
        "ok",
    ),
    # audio out (twice the text): 25,000 + 4 × 10,000 + 8 × 80,000 = 640,000
    "audio_output": (
        once(
            _b(
                "gpt-4o-audio-preview",
                modalities=["text", "audio"],
                audio={"voice": "alloy", "format": "wav"},
            )
        ),
        (10, 0, 0, 4, 8, 705_000),
        "ok",
    ),
}


@pytest.fixture
def matrix(hosted):
    autopilot_off(hosted, "openai")
    return hosted


def test_every_openai_shape_is_booked_at_its_hand_priced_cost(live_server_url, matrix):
    def run(shape):
        steps, expected, status = SHAPES[shape]
        server = matrix["openai"]
        got, row = run_shape(steps, url=live_server_url, key=matrix["key"], server=server)
        return (got, row.provider, row.status), (expected, "openai", status)

    assert len(SHAPES) >= 30
    assert_every_shape(SHAPES, run, reset=lambda: fresh_shape(matrix))


def test_a_stream_relays_usage_only_to_a_client_that_asked(live_server_url, matrix):
    chat = openai_client(live_server_url, matrix["key"]).chat.completions
    quiet = list(chat.create(**_b(), stream=True))
    assert all(chunk.usage is None for chunk in quiet) and quiet[-1].choices
    asked = list(chat.create(**_b(), stream=True, stream_options={"include_usage": True}))
    assert asked[-1].choices == [] and asked[-1].usage.prompt_tokens == 10
    sent = [r["body"] for r in matrix["openai"].received]
    assert all(b["stream_options"] == {"include_usage": True} for b in sent)


def test_an_unknown_parameter_is_refused_by_name_and_nothing_is_sent(live_server_url, matrix):
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client(live_server_url, matrix["key"]).chat.completions.create(
            **_b(), extra_body={"frobnicate": 1}
        )
    assert raised.value.body["code"] == "unsupported_parameter"
    assert raised.value.body["param"] == "frobnicate"
    assert matrix["openai"].received == []


def test_the_reasoning_and_audio_details_reach_the_client(live_server_url, matrix):
    rid = new_request_id()
    answer = openai_client(live_server_url, matrix["key"]).chat.completions.create(
        **_b("gpt-5", reasoning_effort="high"), extra_headers={"x-request-id": rid}
    )
    assert answer.usage.completion_tokens_details.reasoning_tokens == 256
    assert booked(rid).output_tokens == 260
