"""DeepSeek through Cacheplane, priced by hand: the official ``openai`` SDK against the
local DeepSeek server (disk caching in 64-token units, ``prompt_cache_hit_tokens`` /
``prompt_cache_miss_tokens``), every shape's ledger row checked.

n$ a token: deepseek-chat miss 270, hit 70, output 1,100; deepseek-reasoner miss 550,
hit 140, output 2,190 (it reasons 32 tokens, billed as output, inside its limit). The
off-peak shapes price with a discount window covering the whole day (50 % for chat,
75 % for reasoner), applied to every line.
"""

from __future__ import annotations

import pytest

from tests.providers.chat_matrix import autopilot_off, run_shape
from tests.providers.conftest import PRICES
from tests.providers.support import D, assert_every_shape, fresh_shape

D10 = D(10)
# One test sends every shape (one transactional database, each shape after fresh_shape):
# the three matrices take about a minute together, so they run in the plain suite.
pytestmark = pytest.mark.django_db(transaction=True)
CHAT, REASONER = "deepseek-chat", "deepseek-reasoner"
ASK40 = [{"role": "user", "content": "reply with 40 tokens"}]  # 5 tokens
LOOKUP = {
    "type": "function",
    "function": {"name": "lookup", "description": D(10), "parameters": {"type": "object"}},
}
HISTORY = [
    {"role": "user", "content": D(10)},
    {"role": "assistant", "content": "tok tok tok tok "},
    {"role": "user", "content": D(10)},
]


def _b(model=CHAT, content=D10, **more):
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return {"model": model, "messages": messages, **more}


def _sys(n, user=D10):
    return [{"role": "system", "content": D(n)}, {"role": "user", "content": user}]


def once(body, stream=False):
    return [(body, stream, 0, None)]


def twice(body, stream=False, advance=0):
    return [(body, False, 0, None), (body, stream, advance, None)]


# name: (steps, (prompt, hit, audio, output, audio output, cost n$), status, off-peak)
SHAPES = {
    # 10 × 270 + 4 × 1,100 = 2,700 + 4,400
    "plain": (once(_b()), (10, 0, 0, 4, 0, 7_100), "ok", False),
    # 100 × 270 + 4,400
    "first_miss": (once(_b(content=D(100))), (100, 0, 0, 4, 0, 31_400), "ok", False),
    # one 64-token unit hit: 36 × 270 = 9,720 + 64 × 70 = 4,480 + 4,400
    "hit_64": (twice(_b(content=D(100))), (100, 64, 0, 4, 0, 18_600), "ok", False),
    # 63 tokens fill no unit: 63 × 270 = 17,010 + 4,400
    "under_one_unit": (twice(_b(content=D(63))), (63, 0, 0, 4, 0, 21_410), "ok", False),
    # exactly one unit: 64 × 70 + 4,400
    "exactly_one_unit": (twice(_b(content=D(64))), (64, 64, 0, 4, 0, 8_880), "ok", False),
    # two units: 128 × 70 = 8,960 + 4,400
    "two_units": (twice(_b(content=D(128))), (128, 128, 0, 4, 0, 13_360), "ok", False),
    # 1,000 first: 270,000 + 4,400
    "long_miss": (once(_b(content=D(1000))), (1000, 0, 0, 4, 0, 274_400), "ok", False),
    # 15 units = 960 hit: 40 × 270 = 10,800 + 960 × 70 = 67,200 + 4,400
    "long_hit": (twice(_b(content=D(1000))), (1000, 960, 0, 4, 0, 82_400), "ok", False),
    # the third request hits as the second did
    "third_hit": (
        [*twice(_b(content=D(100))), (_b(content=D(100)), False, 0, None)],
        (100, 64, 0, 4, 0, 18_600),
        "ok",
        False,
    ),
    # the same system, another question: 3 units (192) in common of 210:
    # 18 × 270 = 4,860 + 192 × 70 = 13,440 + 4,400
    "shared_system": (
        [
            (_b(content=_sys(200)), False, 0, None),
            (_b(content=_sys(200, user="wxyz" * 10)), False, 0, None),
        ],
        (210, 192, 0, 4, 0, 22_700),
        "ok",
        False,
    ),
    # the server keeps units 10 minutes: 601 s later a miss, as first_miss
    "lapsed": (twice(_b(content=D(100)), advance=601), (100, 0, 0, 4, 0, 31_400), "ok", False),
    # 5 × 270 = 1,350 + 40 × 1,100 = 44,000
    "long_answer": (once(_b(content=ASK40)), (5, 0, 0, 40, 0, 45_350), "ok", False),
    # capped at 10: 1,350 + 11,000
    "max_tokens_cap": (
        once(_b(content=ASK40, max_tokens=10)),
        (5, 0, 0, 10, 0, 12_350),
        "ok",
        False,
    ),
    # 24 tokens: 6,480 + 4,400
    "history": (once(_b(content=HISTORY)), (24, 0, 0, 4, 0, 10_880), "ok", False),
    # a 34-token tool + 10: 44 × 270 = 11,880 + 4,400
    "tool_definition": (once(_b(tools=[LOOKUP])), (44, 0, 0, 4, 0, 16_280), "ok", False),
    # sampling parameters pass through: as plain
    "sampling_parameters": (
        once(_b(temperature=0.5, top_p=0.8, stop="zz", presence_penalty=0.1)),
        (10, 0, 0, 4, 0, 7_100),
        "ok",
        False,
    ),
    # reasoner: 10 × 550 = 5,500 + (32 + 4) × 2,190 = 78,840
    "reasoner": (once(_b(REASONER)), (10, 0, 0, 36, 0, 84_340), "ok", False),
    # 36 × 550 = 19,800 + 64 × 140 = 8,960 + 78,840
    "reasoner_hit": (
        twice(_b(REASONER, content=D(100))),
        (100, 64, 0, 36, 0, 107_600),
        "ok",
        False,
    ),
    # 5 × 550 = 2,750 + 72 × 2,190 = 157,680
    "reasoner_long_answer": (
        once(_b(REASONER, content=ASK40)),
        (5, 0, 0, 72, 0, 160_430),
        "ok",
        False,
    ),
    # max_tokens 20 covers the reasoning: 20 output, 2,750 + 43,800
    "reasoner_limit": (
        once(_b(REASONER, content=ASK40, max_tokens=20)),
        (5, 0, 0, 20, 0, 46_550),
        "ok",
        False,
    ),
    # streamed: as plain, as hit_64, as reasoner, as long_hit
    "stream": (
        once(_b(stream_options={"include_usage": True}), True),
        (10, 0, 0, 4, 0, 7_100),
        "ok",
        False,
    ),
    "stream_no_usage_asked": (once(_b(), True), (10, 0, 0, 4, 0, 7_100), "ok", False),
    "stream_hit": (twice(_b(content=D(100)), True), (100, 64, 0, 4, 0, 18_600), "ok", False),
    "stream_reasoner": (once(_b(REASONER), True), (10, 0, 0, 36, 0, 84_340), "ok", False),
    "stream_long_hit": (
        twice(_b(content=D(1000)), True),
        (1000, 960, 0, 4, 0, 82_400),
        "ok",
        False,
    ),
    # cut after 2 chunks: the prompt's estimate (50 bytes of JSON / 4 + 1 = 13) and 2
    # tokens: 13 × 270 = 3,510 + 2,200
    "stream_cut": (
        [(_b(content=ASK40), True, 0, 2)],
        (13, 0, 0, 2, 0, 5_710),
        "upstream_error",
        False,
    ),
    # off-peak (published: miss 0.135, hit 0.035, output 0.550 per 1M; for chat each
    # line halved): 1,350 + 2,200
    "off_peak": (once(_b()), (10, 0, 0, 4, 0, 3_550), "ok", True),
    # 4,860 + 2,240 + 2,200
    "off_peak_hit": (twice(_b(content=D(100))), (100, 64, 0, 4, 0, 9_300), "ok", True),
    # reasoner at DeepSeek's published off-peak prices (not 25 % of each rate, which
    # gave 1,375 + 19,710): 10 × 135 + 36 × 550 = 1,350 + 19,800
    "off_peak_reasoner": (once(_b(REASONER)), (10, 0, 0, 36, 0, 21_150), "ok", True),
    # streamed off-peak: as off_peak
    "off_peak_stream": (once(_b(), True), (10, 0, 0, 4, 0, 3_550), "ok", True),
}
#: DeepSeek's published off-peak prices (USD per 1M tokens), the same for both models.
OFF_PEAK = {"input": "0.135", "cached_input": "0.035", "output": "0.550"}
ALL_DAY = [
    {"start": "00:00", "end": "23:59", "percent": 0, "rates": OFF_PEAK},
    {"start": "23:59", "end": "00:00", "percent": 0, "rates": OFF_PEAK},
]


@pytest.fixture
def matrix(hosted):
    autopilot_off(hosted, "deepseek")
    return hosted


def _discount(off_peak: bool) -> None:
    """Correct each model's current price (a new version; the booked rows keep theirs)
    to its listed rates, with the all-day off-peak window at the published off-peak
    prices when ``off_peak``."""
    from billing.models import ModelPrice
    from billing.services.prices import model_price_correct
    from gateway import pricing
    from tests.factories import actor_for

    for model in (CHAT, REASONER):
        price = ModelPrice.objects.get(provider="deepseek", model=model, superseded_at=None)
        rates = {**PRICES[("deepseek", model)], "time_discounts": ALL_DAY if off_peak else []}
        model_price_correct(actor=actor_for(None), price=price, rates=rates, source="test")
    pricing.forget()


def test_every_deepseek_shape_is_booked_at_its_hand_priced_cost(live_server_url, matrix):
    def run(shape):
        steps, expected, status, off_peak = SHAPES[shape]
        if off_peak:
            _discount(True)
        try:
            server = matrix["deepseek"]
            got, row = run_shape(steps, url=live_server_url, key=matrix["key"], server=server)
        finally:
            if off_peak:
                _discount(False)
        return (got, row.provider, row.status), (expected, "deepseek", status)

    assert len(SHAPES) >= 30
    assert_every_shape(SHAPES, run, reset=lambda: fresh_shape(matrix))
