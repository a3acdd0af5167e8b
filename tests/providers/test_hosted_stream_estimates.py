"""A cut stream whose cost the stream does not show is booked as an estimate, and an audio
prompt on a cut stream is booked at the audio rate (issues #26 and #23).

Through the real gateway and the local OpenAI and Anthropic servers (``tests.servers``):

- GPT-5 reasons before it answers and bills that reasoning (``reasoning_tokens``, inside
  ``completion_tokens``) without streaming it; a request asking for spoken output is
  billed audio output tokens the text deltas do not show; Claude's extended thinking is
  streamed as a summary and billed in full. Cut before the provider's usage, such a
  stream books its reservation (the budget hold: the priced upper bound), flagged
  ``estimated`` for ``usage_estimate_correct``, as a timed-out request does. The local
  OpenAI server thinks 64 tokens at the default ``reasoning_effort`` before the first
  content chunk and bills spoken output at twice the text tokens; the local Anthropic
  server does not think (what is proven there is the gateway's side: the request's
  declaration, the estimate, the settlement).
- An ``input_audio`` part of a prompt cut before the usage chunk is booked as audio
  (its base64 characters / 4, rounded up: the local server's count for it), at the
  audio input rate, the rest of the prompt's estimate as text.

Prices (n$ a token): gpt-5 input 1,250, output 10,000; gpt-4o-audio-preview text in
2,500, out 10,000, audio in 40,000, audio out 80,000; claude-sonnet-4-5 input 3,000, 1-hour
cache write 6,000, output 15,000. A reservation is every prompt token (the prompt's
compact JSON bytes + 16) at the dearest input-side rate plus ``max_tokens`` at the
dearest output rate, rounded half-even to the µ$.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.caches.processes import wait_for
from tests.gateway.support import hard_budget
from tests.providers.support import (
    anthropic_client,
    booked,
    chat_content_read,
    new_request_id,
    openai_client,
)

pytestmark = pytest.mark.django_db(transaction=True)
ASK = [{"role": "user", "content": "reply with 200 tokens"}]  # 6 tokens; JSON: 51 bytes
BOUND = len(json.dumps(ASK, separators=(",", ":"))) + 16  # the reservation's prompt: 67
READ = 3  # content chunks the client reads before it closes the stream
DELAY = 0.05  # seconds a content token: the whole answer would take 10 s
AUDIO_DATA = "A" * 400  # 100 audio tokens at the local server (base64 characters / 4)
WITH_AUDIO = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "reply with 200 tokens"},
            {"type": "input_audio", "input_audio": {"data": AUDIO_DATA, "format": "wav"}},
        ],
    }
]


def _read_then_leave(
    url: str, key: str, rid: str, leave_after: int | None = READ, **request
) -> int:
    """Stream a chat completion and close it after ``leave_after`` content chunks (None:
    read to the end, the provider's error event included); the content chunks seen."""
    seen = 0
    try:
        with openai_client(url, key).chat.completions.create(
            max_completion_tokens=400,
            stream=True,
            extra_headers={"x-request-id": rid},
            **request,
        ) as stream:
            seen = chat_content_read(stream, leave_after)
    except openai.APIError:  # the gateway's error event: the provider's stream broke
        pass
    return seen


def _settled_once(budget, row) -> None:
    """The hold is gone and the budget's spend is this one row's cost, to the n$."""
    from billing.models import BudgetPeriod, UsageRecord
    from billing.services.budget_reservations import budget_period_live, budget_settlements_flush
    from billing.services.usage import usage_flush

    budget_settlements_flush()
    usage_flush()
    period = BudgetPeriod.objects.all_tenants().get(budget=budget)
    live = budget_period_live(period_id=period.pk)
    assert live["reserved"] == 0
    assert UsageRecord.objects.all_tenants().filter(tenant=row.tenant).count() == 1
    assert period.spent_nanos == row.cost_nanos == live["spent_nanos"]


@pytest.mark.parametrize("cut_by", ["client", "provider"])
def test_a_reasoning_stream_cut_before_its_usage_books_its_reservation_as_an_estimate(
    live_server_url, hosted, cut_by
):
    server = hosted["openai"]
    server.stream_delay = DELAY
    if cut_by == "provider":
        server.cut_after = READ  # the server drops the connection after 3 content chunks
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    leave_after = READ if cut_by == "client" else None
    _read_then_leave(live_server_url, hosted["key"], rid, leave_after, model="gpt-5", messages=ASK)
    row = booked(rid)
    wait_for(lambda: bool(server.generated), 10, "the server's end of the stream")
    generated = server.generated[-1]  # 64 reasoning tokens + the content produced
    assert row.status == ("client_disconnect" if cut_by == "client" else "upstream_error")
    assert row.estimated
    # The reservation: 67 × 1,250 + 400 × 10,000 = 4,083,750 n$ → 4,084 µ$.
    assert row.cost_nanos == 4_084_000
    # Never under what OpenAI bills the cut: 6 prompt tokens and every token generated
    # (its hidden reasoning included), which the streamed count alone missed by far.
    billed = 6 * 1_250 + generated * 10_000
    assert generated >= 64 + READ and row.cost_nanos >= billed
    assert row.prompt_tokens * 1_250 + row.output_tokens * 10_000 < billed
    _settled_once(budget, row)


def test_a_reasoning_stream_that_ends_is_booked_exactly_from_the_usage_chunk(
    live_server_url, hosted
):
    """The estimate is for cut streams only: one that reaches its usage chunk is booked
    as OpenAI bills it (64 reasoning tokens + 4 content tokens), not estimated; then the
    same request cut is estimated."""
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    ask = [{"role": "user", "content": "hi"}]
    chunks = list(
        openai_client(live_server_url, hosted["key"]).chat.completions.create(
            model="gpt-5",
            messages=ask,
            max_tokens=400,
            stream=True,
            extra_headers={"x-request-id": rid},
        )
    )
    assert chunks
    row = booked(rid)
    assert (row.status, row.estimated) == ("ok", False)
    assert (row.prompt_tokens, row.output_tokens) == (1, 68)
    assert row.cost_nanos == 1 * 1_250 + 68 * 10_000
    _settled_once(budget, row)
    hosted["openai"].stream_delay = DELAY
    cut = new_request_id()
    _read_then_leave(live_server_url, hosted["key"], cut, model="gpt-5", messages=ASK)
    assert booked(cut).estimated


def test_a_stream_asking_for_spoken_output_cut_before_its_usage_is_an_estimate(
    live_server_url, hosted
):
    server = hosted["openai"]
    server.stream_delay = DELAY
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    _read_then_leave(
        live_server_url,
        hosted["key"],
        rid,
        model="gpt-4o-audio-preview",
        messages=ASK,
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
    )
    row = booked(rid)
    wait_for(lambda: bool(server.generated), 10, "the server's end of the stream")
    produced = server.generated[-1]
    assert (row.status, row.estimated) == ("client_disconnect", True)
    # Spoken output is reserved at the audio output rate: 67 × 2,500 + 400 × 80,000 =
    # 32,167,500 n$ → 32,168 µ$ (half-even).
    assert row.cost_nanos == 32_168_000
    # OpenAI bills the audio it generated alongside the text (twice the text tokens).
    billed = 6 * 2_500 + produced * 10_000 + 2 * produced * 80_000
    assert row.cost_nanos >= billed
    _settled_once(budget, row)


def test_a_claude_stream_with_extended_thinking_cut_before_message_delta_is_an_estimate(
    live_server_url, hosted
):
    server = hosted["anthropic"]
    server.stream_delay = DELAY
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    seen = 0
    with anthropic_client(live_server_url, hosted["key"]).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=ASK,
        stream=True,
        extra_headers={"x-request-id": rid},
    ) as stream:
        for event in stream:
            seen += event.type == "content_block_delta"
            if seen == READ:
                break
    row = booked(rid)
    assert (row.status, row.estimated) == ("client_disconnect", True)
    # 67 × 6,000 (the dearest input side: a 1-hour cache write) + 2,048 × 15,000.
    assert row.cost_nanos == 67 * 6_000 + 2_048 * 15_000
    _settled_once(budget, row)


def test_an_audio_prompt_on_a_cut_stream_is_booked_at_the_audio_input_rate(live_server_url, hosted):
    server = hosted["openai"]
    server.stream_delay = DELAY
    budget = hard_budget(hosted, limit_micros=10**9)
    rid = new_request_id()
    seen = _read_then_leave(
        live_server_url, hosted["key"], rid, model="gpt-4o-audio-preview", messages=WITH_AUDIO
    )
    assert seen == READ
    row = booked(rid)
    estimate = len(json.dumps(WITH_AUDIO, separators=(",", ":"))) // 4 + 1
    assert (row.status, row.estimated) == ("client_disconnect", False)
    assert (row.prompt_tokens, row.audio_prompt_tokens) == (estimate, 100)
    assert READ <= row.output_tokens < 200
    # The audio part at 40,000 n$, the rest of the prompt's estimate at 2,500 n$.
    assert row.cost_nanos == (estimate - 100) * 2_500 + 100 * 40_000 + row.output_tokens * 10_000
    # Never under OpenAI's prompt bill (6 text tokens and 100 audio tokens).
    assert row.cost_nanos - row.output_tokens * 10_000 >= 6 * 2_500 + 100 * 40_000
    _settled_once(budget, row)
