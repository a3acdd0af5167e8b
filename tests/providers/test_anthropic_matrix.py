"""Anthropic through Cacheplane, priced by hand: the official ``anthropic`` SDK on
``/v1/messages`` and the ``openai`` SDK on ``/v1/chat/completions`` (a Claude model),
against the local Anthropic server (``tests.servers.anthropic_server``).

Each shape's last request is checked in the ledger: its counts and its cost in nano-USD,
a literal worked out below from the price book's rates (USD per 1M tokens → n$ a token):
Sonnet 4.5 input 3.00 → 3,000; 5-minute write 3.75 → 3,750; 1-hour write 6.00 → 6,000;
read 0.30 → 300; output 15.00 → 15,000. Haiku 4.5: 1,000 / 1,250 / 2,000 / 100 / 5,000.
``D(n)`` is a text of n tokens; the server answers 4 output tokens unless asked
("reply with N tokens": 20 characters, 5 tokens). The autopilot is off here
(the client's breakpoints only; ``test_breakpoint_autopilot`` covers it).
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.providers.support import (
    D,
    anthropic_client,
    assert_every_shape,
    booked,
    fresh_shape,
    new_request_id,
    openai_client,
)
from tests.servers.anthropic_server import Fault

# One test sends every shape (one transactional database, each shape after fresh_shape):
# the three matrices take about a minute together, so they run in the plain suite.
pytestmark = pytest.mark.django_db(transaction=True)
SONNET, HAIKU = "claude-sonnet-4-5", "claude-haiku-4-5"
C5, C1 = {"type": "ephemeral", "ttl": "5m"}, {"type": "ephemeral", "ttl": "1h"}
USER10 = [{"role": "user", "content": D(10)}]


def _msg(model=SONNET, system=None, messages=USER10, max_tokens=100, **more):
    body = {"model": model, "max_tokens": max_tokens, "messages": messages, **more}
    if system is not None:
        body["system"] = system
    return body


def _sys(n, control=None):
    block = {"type": "text", "text": D(n)}
    return [{**block, "cache_control": control}] if control else [block]


def _lookup(k, control=None):
    """A tool of k + 17 tokens: its compact JSON is 67 + 4k characters."""
    tool = {"name": "lookup", "description": D(k), "input_schema": {"type": "object"}}
    return {**tool, "cache_control": control} if control else tool


def _chat_lookup(k):
    return {
        "type": "function",
        "function": {"name": "lookup", "description": D(k), "parameters": {"type": "object"}},
    }


ASK40 = [{"role": "user", "content": "reply with 40 tokens"}]  # 5 tokens
TURN2 = [
    {"role": "user", "content": D(10)},
    {"role": "assistant", "content": "tok tok tok tok "},  # 4 tokens
    {"role": "user", "content": [{"type": "text", "text": D(10), "cache_control": C5}]},
]
TOOL_ROUND = [
    {"role": "user", "content": D(10)},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "toolu_1", "content": "abcd"},
]

# name: (steps, (prompt, read, write_5m, write_1h, output, cost_nanos), status)
# a step: (api, body, stream, seconds to advance the server's clock first, fault)
SHAPES = {
    # 10 × 3,000 + 4 × 15,000 = 30,000 + 60,000
    "plain": ([("messages", _msg(), False, 0, None)], (10, 0, 0, 0, 4, 90_000), "ok"),
    # 110 × 3,000 + 60,000
    "system_uncached": (
        [("messages", _msg(system=_sys(100)), False, 0, None)],
        (110, 0, 0, 0, 4, 390_000),
        "ok",
    ),
    # write 2,000 × 3,750 = 7,500,000 + input 10 × 3,000 + 60,000
    "system_write_5m": (
        [("messages", _msg(system=_sys(2000, C5)), False, 0, None)],
        (2010, 0, 2000, 0, 4, 7_590_000),
        "ok",
    ),
    # read 2,000 × 300 = 600,000 + 30,000 + 60,000
    "system_read_5m": (
        [("messages", _msg(system=_sys(2000, C5)), False, 0, None)] * 2,
        (2010, 2000, 0, 0, 4, 690_000),
        "ok",
    ),
    # write 2,000 × 6,000 = 12,000,000 + 30,000 + 60,000
    "system_write_1h": (
        [("messages", _msg(system=_sys(2000, C1)), False, 0, None)],
        (2010, 0, 0, 2000, 4, 12_090_000),
        "ok",
    ),
    # 1,500 × 6,000 = 9,000,000 + 500 × 3,750 = 1,875,000 + 10 × 3,000 + 60,000
    "two_breakpoints_1h_then_5m": (
        [
            (
                "messages",
                _msg(
                    system=_sys(1500, C1),
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": D(500), "cache_control": C5},
                                {"type": "text", "text": D(10)},
                            ],
                        }
                    ],
                ),
                False,
                0,
                None,
            )
        ],
        (2010, 0, 500, 1500, 4, 10_965_000),
        "ok",
    ),
    # 1,000 < Sonnet's 1,024 minimum: nothing cached; 1,010 × 3,000 + 60,000
    "below_sonnet_minimum": (
        [("messages", _msg(system=_sys(1000, C5)), False, 0, None)],
        (1010, 0, 0, 0, 4, 3_090_000),
        "ok",
    ),
    # 2,000 < Haiku's 4,096: 2,010 × 1,000 + 4 × 5,000
    "below_haiku_minimum": (
        [("messages", _msg(model=HAIKU, system=_sys(2000, C5)), False, 0, None)],
        (2010, 0, 0, 0, 4, 2_030_000),
        "ok",
    ),
    # 5,000 × 1,250 = 6,250,000 + 10 × 1,000 + 20,000
    "haiku_write_5m": (
        [("messages", _msg(model=HAIKU, system=_sys(5000, C5)), False, 0, None)],
        (5010, 0, 5000, 0, 4, 6_280_000),
        "ok",
    ),
    # 5,000 × 2,000 = 10,000,000 + 10,000 + 20,000
    "haiku_write_1h": (
        [("messages", _msg(model=HAIKU, system=_sys(5000, C1)), False, 0, None)],
        (5010, 0, 0, 5000, 4, 10_030_000),
        "ok",
    ),
    # 5,000 × 100 = 500,000 + 10,000 + 20,000
    "haiku_read": (
        [("messages", _msg(model=HAIKU, system=_sys(5000, C5)), False, 0, None)] * 2,
        (5010, 5000, 0, 0, 4, 530_000),
        "ok",
    ),
    # 5 × 3,000 + 40 × 15,000 = 15,000 + 600,000
    "long_answer": (
        [("messages", _msg(messages=ASK40), False, 0, None)],
        (5, 0, 0, 0, 40, 615_000),
        "ok",
    ),
    # capped at max_tokens 10: 15,000 + 10 × 15,000
    "max_tokens_cap": (
        [("messages", _msg(messages=ASK40, max_tokens=10), False, 0, None)],
        (5, 0, 0, 0, 10, 165_000),
        "ok",
    ),
    # as system_write_5m, streamed: message_start's input side + message_delta's output
    "stream_write_5m": (
        [("messages", _msg(system=_sys(2000, C5)), True, 0, None)],
        (2010, 0, 2000, 0, 4, 7_590_000),
        "ok",
    ),
    # as system_read_5m, streamed
    "stream_read_5m": (
        [("messages", _msg(system=_sys(2000, C5)), True, 0, None)] * 2,
        (2010, 2000, 0, 0, 4, 690_000),
        "ok",
    ),
    # as long_answer, streamed: 40 deltas, cumulative output 40
    "stream_long_answer": (
        [("messages", _msg(messages=ASK40), True, 0, None)],
        (5, 0, 0, 0, 40, 615_000),
        "ok",
    ),
    # OpenAI SDK, Claude model, translated: as plain
    "chat_plain": (
        [("chat", {"model": SONNET, "messages": USER10, "max_tokens": 100}, False, 0, None)],
        (10, 0, 0, 0, 4, 90_000),
        "ok",
    ),
    # OpenAI SDK streamed with include_usage: as plain
    "chat_stream": (
        [("chat", {"model": SONNET, "messages": USER10, "max_tokens": 100}, True, 0, None)],
        (10, 0, 0, 0, 4, 90_000),
        "ok",
    ),
    # a client's cache_control on a system part (the LiteLLM convention): as system_write_5m
    "chat_system_breakpoint": (
        [
            (
                "chat",
                {
                    "model": SONNET,
                    "max_tokens": 100,
                    "messages": [
                        {
                            "role": "system",
                            "content": [{"type": "text", "text": D(2000), "cache_control": C5}],
                        },
                        *USER10,
                    ],
                },
                False,
                0,
                None,
            )
        ],
        (2010, 0, 2000, 0, 4, 7_590_000),
        "ok",
    ),
    # two system messages merged; the breakpoint at 1,200: 1,200 × 3,750 = 4,500,000
    # + 30,000 + 60,000
    "chat_two_system_messages": (
        [
            (
                "chat",
                {
                    "model": SONNET,
                    "max_tokens": 100,
                    "messages": [
                        {"role": "system", "content": D(600)},
                        {
                            "role": "system",
                            "content": [{"type": "text", "text": D(600), "cache_control": C5}],
                        },
                        *USER10,
                    ],
                },
                False,
                0,
                None,
            )
        ],
        (1210, 0, 1200, 0, 4, 4_590_000),
        "ok",
    ),
    # a tool of 2,017 tokens cached: 2,017 × 3,750 = 7,563,750 + 30,000 + 60,000
    "tool_definition_cached": (
        [("messages", _msg(tools=[_lookup(2000, C5)]), False, 0, None)],
        (2027, 0, 2017, 0, 4, 7_653_750),
        "ok",
    ),
    # forced tool use (tool 27 + user 10 tokens): 37 × 3,000 + 60,000
    "tool_use_answer": (
        [
            (
                "messages",
                _msg(tools=[_lookup(10)], tool_choice={"type": "any"}),
                False,
                0,
                None,
            )
        ],
        (37, 0, 0, 0, 4, 171_000),
        "ok",
    ),
    # the same through the OpenAI SDK (tool_choice "required" → any)
    "chat_tool_use_answer": (
        [
            (
                "chat",
                {
                    "model": SONNET,
                    "max_tokens": 100,
                    "messages": USER10,
                    "tools": [_chat_lookup(10)],
                    "tool_choice": "required",
                },
                False,
                0,
                None,
            )
        ],
        (37, 0, 0, 0, 4, 171_000),
        "ok",
    ),
    # a tool round trip: tool 27 + user 10 + tool_use 16 (61 characters) + tool_result
    # 16 (63 characters) = 69 × 3,000 + 60,000
    "chat_tool_result": (
        [
            (
                "chat",
                {
                    "model": SONNET,
                    "max_tokens": 100,
                    "messages": TOOL_ROUND,
                    "tools": [_chat_lookup(10)],
                },
                False,
                0,
                None,
            )
        ],
        (69, 0, 0, 0, 4, 267_000),
        "ok",
    ),
    # turn 2 reads turn 1's 1,210 (20-block lookback) and writes 14 more:
    # 1,210 × 300 = 363,000 + 14 × 3,750 = 52,500 + 60,000
    "multi_turn_incremental": (
        [
            (
                "messages",
                _msg(
                    system=_sys(1200),
                    messages=[
                        {
                            "role": "user",
                            "content": [{"type": "text", "text": D(10), "cache_control": C5}],
                        }
                    ],
                ),
                False,
                0,
                None,
            ),
            ("messages", _msg(system=_sys(1200), messages=TURN2), False, 0, None),
        ],
        (1224, 1210, 14, 0, 4, 475_500),
        "ok",
    ),
    # a 5-minute entry lapses after 301 s: written again, as system_write_5m
    "five_minutes_lapse": (
        [
            ("messages", _msg(system=_sys(2000, C5)), False, 0, None),
            ("messages", _msg(system=_sys(2000, C5)), False, 301, None),
        ],
        (2010, 0, 2000, 0, 4, 7_590_000),
        "ok",
    ),
    # a 1-hour entry is still there after 10 minutes: as system_read_5m
    "one_hour_survives": (
        [
            ("messages", _msg(system=_sys(2000, C1)), False, 0, None),
            ("messages", _msg(system=_sys(2000, C1)), False, 600, None),
        ],
        (2010, 2000, 0, 0, 4, 690_000),
        "ok",
    ),
    # a read refreshes the 5 minutes: reads at 240 s and 480 s (the last 690,000)
    "read_refreshes_ttl": (
        [
            ("messages", _msg(system=_sys(2000, C5)), False, 0, None),
            ("messages", _msg(system=_sys(2000, C5)), False, 240, None),
            ("messages", _msg(system=_sys(2000, C5)), False, 240, None),
        ],
        (2010, 2000, 0, 0, 4, 690_000),
        "ok",
    ),
    # top-level cache_control marks the last block: 2,010 × 3,750 = 7,537,500 + 60,000
    "automatic_caching": (
        [("messages", _msg(system=_sys(2000), cache_control=C5), False, 0, None)],
        (2010, 0, 2010, 0, 4, 7_597_500),
        "ok",
    ),
    # 4 breakpoints, the first below 1,024 (the tool, 1,017): 1,117 × 6,000 = 6,702,000
    # + 110 × 3,750 = 412,500 + 60,000
    "four_breakpoints": (
        [
            (
                "messages",
                _msg(
                    tools=[_lookup(1000, C1)],
                    system=_sys(100, C1),
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": D(100), "cache_control": C5},
                                {"type": "text", "text": D(10), "cache_control": C5},
                            ],
                        }
                    ],
                ),
                False,
                0,
                None,
            )
        ],
        (1227, 0, 110, 1117, 4, 7_174_500),
        "ok",
    ),
    # Anthropic cuts the stream after 2 deltas: message_start's input (10) and the 2
    # tokens streamed are billed: 30,000 + 2 × 15,000
    "stream_cut_by_provider": (
        [("messages", _msg(messages=ASK40), True, 0, Fault("cut", after=2))],
        (5, 0, 0, 0, 2, 45_000),
        "upstream_error",
    ),
    # an error event after 1 delta: 15,000 + 1 × 15,000
    "stream_error_event": (
        [("messages", _msg(messages=ASK40), True, 0, Fault("error_event", after=1))],
        (5, 0, 0, 0, 1, 30_000),
        "upstream_error",
    ),
    # streamed through the OpenAI SDK, a cache write: as system_write_5m
    "chat_stream_write_1h": (
        [
            (
                "chat",
                {
                    "model": SONNET,
                    "max_tokens": 100,
                    "messages": [
                        {
                            "role": "system",
                            "content": [{"type": "text", "text": D(2000), "cache_control": C1}],
                        },
                        *USER10,
                    ],
                },
                True,
                0,
                None,
            )
        ],
        (2010, 0, 0, 2000, 4, 12_090_000),
        "ok",
    ),
    # Haiku streamed through the OpenAI SDK: 10 × 1,000 + 4 × 5,000
    "chat_stream_haiku": (
        [("chat", {"model": HAIKU, "messages": USER10, "max_tokens": 50}, True, 0, None)],
        (10, 0, 0, 0, 4, 30_000),
        "ok",
    ),
}


def _send(step, url: str, key: str, server, request_id: str) -> None:
    api, body, stream, advance, fault = step
    server.clock.advance(advance)
    if fault is not None:
        server.faults.append(fault)
    headers = {"x-request-id": request_id}
    try:
        if api == "messages":
            client = anthropic_client(url, key)
            if stream:
                for _ in client.messages.create(**body, stream=True, extra_headers=headers):
                    pass
            else:
                client.messages.create(**body, extra_headers=headers)
        else:
            chat = openai_client(url, key).chat.completions
            if stream:
                options = {"include_usage": True}
                for _ in chat.create(
                    **body, stream=True, stream_options=options, extra_headers=headers
                ):
                    pass
            else:
                chat.create(**body, extra_headers=headers)
    except (anthropic.APIError, openai.APIError):
        assert fault is not None, "only a fault may fail a request here"


@pytest.fixture
def matrix(hosted):
    from gateway.provider_credentials import provider_credential_get, provider_credential_update

    credential = provider_credential_get(tenant=hosted["tenant"], provider="anthropic")
    provider_credential_update(credential=credential, actor=hosted["actor"], cache_autopilot=False)
    return hosted


def test_every_anthropic_shape_is_booked_at_its_hand_priced_cost(live_server_url, matrix):
    def run(shape):
        steps, expected, status = SHAPES[shape]
        request_id = ""
        for step in steps:
            request_id = new_request_id()
            _send(step, live_server_url, matrix["key"], matrix["anthropic"], request_id)
        row = booked(request_id)
        got = (
            row.prompt_tokens,
            row.cached_read_tokens,
            row.cache_write_5m_tokens,
            row.cache_write_1h_tokens,
            row.output_tokens,
            row.cost_nanos,
        )
        return (got, row.provider, row.status), (expected, "anthropic", status)

    assert len(SHAPES) >= 30
    assert_every_shape(SHAPES, run, reset=lambda: fresh_shape(matrix))
