"""OpenAI request fields the reference worker refuses (no torch: the gateway imports it)."""

from __future__ import annotations

from typing import Any


def unsupported_parameters(body: dict[str, Any]) -> list[str]:
    """The fields of ``body`` whose output the reference worker cannot produce (the gateway
    refuses them with ``unsupported_parameter`` before routing to reference workers)."""
    used = {
        "logprobs": body.get("logprobs") not in (None, False),
        "top_logprobs": body.get("top_logprobs") not in (None, 0),
        "prompt_logprobs": body.get("prompt_logprobs") is not None,
        "suffix": body.get("suffix") is not None,
        "tools": bool(body.get("tools")),
        # Sampling the reference sampler does not implement (vLLM does): refused, so a
        # client never gets unconstrained output it believes was constrained.
        "response_format": body.get("response_format") not in (None, {"type": "text"}),
        "logit_bias": bool(body.get("logit_bias")),
        "presence_penalty": body.get("presence_penalty") not in (None, 0, 0.0),
        "frequency_penalty": body.get("frequency_penalty") not in (None, 0, 0.0),
        "repetition_penalty": body.get("repetition_penalty") not in (None, 1, 1.0),
        "best_of": body.get("best_of") not in (None, 1),
        "min_p": body.get("min_p") not in (None, 0, 0.0),
    }
    return [name for name, present in used.items() if present]
