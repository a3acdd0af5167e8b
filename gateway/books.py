"""What one request has taken on its way through ``gateway.pipeline`` (a rate-limit
slot, a fair-share slot, a budget hold) and closing it exactly once: give back what was
taken, settle the hold with the request's cost, meter the usage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from billing.pricing import UsageCounts
from gateway import budget, closing, fairshare, limits, pricing, ratelimit
from gateway.adapters.base import Call, Target
from gateway.metering import Meter


@dataclass
class Books:
    """What a request has taken so far, and closing it exactly once."""

    call: Call | None = None
    provider: str = ""
    admission: ratelimit.Admission | None = None
    target: Target | None = None
    queue: fairshare.FairQueue | None = None
    slot: bool = False
    rates: pricing.Rates | None = None
    hold: budget.Hold | None = None
    sent: bool = False
    closed: bool = False

    def open(self, call: Call, provider: str) -> None:
        self.call, self.provider = call, provider

    async def give_back(self) -> None:
        """Return the rate-limit slot and the hold taken so far (nothing was sent)."""
        await limits.close(self.admission, self.hold, actual_tokens=0, actual_micros=0)
        self.admission, self.hold, self.rates = None, None, None

    def rate_headers(self) -> dict[str, str]:
        return self.admission.headers if self.admission is not None else {}

    async def close(self, *, status: str, estimate: bool = False) -> None:
        """Give back the fair-share slot and the rate-limit slot, settle the hold with
        the request's cost, record usage. Never raises (the answer is already decided).
        ``estimate``: the counts do not price it (a timeout; a stream cut before the usage
        of a provider that bills output it does not stream); the reservation is booked,
        flagged ``estimated``."""
        if self.closed:
            return
        self.closed = True
        if self.slot and self.queue is not None:
            self.queue.release()
        call = self.call
        if call is None:
            return
        usage = call.usage
        counts = UsageCounts(
            prompt_tokens=usage.prompt_tokens,
            cached_read_tokens=min(usage.cached_tokens, usage.prompt_tokens),
            cache_write_5m_tokens=usage.cache_write_5m_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            # Audio output is its own count (priced at the audio output rate), on top.
            output_tokens=usage.output_tokens - usage.audio_output_tokens,
            audio_prompt_tokens=usage.audio_prompt_tokens,
            audio_cached_read_tokens=usage.audio_cached_tokens,
            audio_output_tokens=usage.audio_output_tokens,
        )
        used = usage.prompt_tokens + usage.output_tokens  # audio output included
        # Priced at the close, as the ledger's row is (a time-of-day discount applies).
        cost = pricing.cost_micros(self.rates, counts, at=datetime.now(tz=UTC))
        estimate_nanos = None
        if estimate and self.sent:
            estimate_micros = self._reserved_micros(call)
            if estimate_micros is not None:
                cost, estimate_nanos = estimate_micros, estimate_micros * 1000
        part = limits.close_part(
            self.admission,
            self.hold,
            actual_tokens=used if self.sent else 0,
            actual_micros=cost,
        )
        if not self.sent:  # refused by a step (429, 402, 503) before sending
            await closing.close(part, None)
            return
        target = self.target
        extra = call.extra
        meter = Meter(
            request_id=call.ledger_key or call.request_id,
            client_request_id=call.request_id,
            started_at=call.started_at or None,
            estimate_nanos=estimate_nanos,
            tenant_id=call.identity.tenant_id,
            tenant_slug=call.identity.tenant_slug,
            key_id=call.identity.key_id,
            principal_id=call.identity.principal_id,
            provider=self.provider,
            model=call.model,
            stream=call.stream,
            started=call.started,
            worker=target.worker if target else "",
            pool=target.pool if target else "",
            cache_id=call.cache.id if call.cache else None,
            predicted_hit=bool(extra.get("predicted_hit")),
            prompt_tokens=counts.prompt_tokens,
            cached_tokens=counts.cached_read_tokens,
            cache_write_5m_tokens=counts.cache_write_5m_tokens,
            cache_write_1h_tokens=counts.cache_write_1h_tokens,
            output_tokens=counts.output_tokens,
            audio_prompt_tokens=counts.audio_prompt_tokens,
            audio_cached_tokens=counts.audio_cached_read_tokens,
            audio_output_tokens=counts.audio_output_tokens,
            ttft_ms=call.ttft_ms,
            latency_ms=int((time.perf_counter() - call.started) * 1000),
            status=status,
            available_tokens=int(extra.get("available_tokens", 0)),
            routed_tokens=int(extra.get("routed_tokens", 0)),
            cost_micros=cost if self.rates is not None else None,
            extra={k: extra[k] for k in ("autopilot", "route") if extra.get(k)},
        )
        await closing.close(part, meter)

    def _reserved_micros(self, call: Call) -> int | None:
        """Its hold, else its priced upper bound (None: no price, nothing to estimate)."""
        if self.hold is not None and self.hold.amount_micros:
            return self.hold.amount_micros
        if self.rates is None:
            return None
        return call_upper_bound_micros(self.rates, call)


def call_upper_bound_micros(rates: pricing.Rates, call: Call) -> int:
    """The most ``call`` can cost at ``rates``: what its budget hold reserves, and what
    an estimated row books when no hold was taken."""
    return pricing.upper_bound_micros(
        rates,
        prompt_tokens=call.prompt_tokens_bound,
        max_output_tokens=call.max_output_tokens,
        audio_output=pricing.output_may_be_audio(call.body),
        audio_prompt_tokens=call.audio_prompt_tokens_bound,
    )
