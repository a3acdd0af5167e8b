"""The runner of the OpenAI-protocol matrices (OpenAI, DeepSeek): each shape's steps sent
through the official ``openai`` SDK to Cacheplane, the last one's ledger row returned."""

from __future__ import annotations

import openai

from tests.providers.support import booked, new_request_id, openai_client


def run_shape(steps, *, url: str, key: str, server):
    """``steps``: (body, stream, seconds to advance the server's clock, cut after)."""
    request_id = ""
    for body, stream, advance, cut in steps:
        request_id = new_request_id()
        server.clock.advance(advance)
        server.cut_after = cut
        chat = openai_client(url, key).chat.completions
        headers = {"x-request-id": request_id}
        try:
            if stream:
                for _ in chat.create(**body, stream=True, extra_headers=headers):
                    pass
            else:
                chat.create(**body, extra_headers=headers)
        except openai.APIError:
            assert cut is not None, "only a cut stream may fail here"
    row = booked(request_id)
    return (
        row.prompt_tokens,
        row.cached_read_tokens,
        row.audio_prompt_tokens,
        row.output_tokens,
        row.audio_output_tokens,
        row.cost_nanos,
    ), row


def autopilot_off(hosted, provider: str) -> None:
    from gateway.provider_credentials import provider_credential_get, provider_credential_update

    credential = provider_credential_get(tenant=hosted["tenant"], provider=provider)
    provider_credential_update(credential=credential, actor=hosted["actor"], cache_autopilot=False)
