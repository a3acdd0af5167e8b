"""Seed the price book (version 1 of each model, effective 2026-01-01T00:00Z).

Rates in USD per 1M tokens. Gemini rows come from ../shared/specs/vertex-context-cache.md
§4 (as researched 2026-11-30; the spec asks to confirm them against the live pricing page
before billing anyone). Anthropic rows apply the §6 multipliers (5-minute write 1.25×,
1-hour write 2×, read 0.1×) to base prices Cacheplane states itself; OpenAI rows follow
the §6 rule (automatic caching, no write premium before GPT-5.6) with stated base prices.
Corrections later go through the API as new versions; this migration never runs again.
"""

from datetime import UTC, datetime
from decimal import Decimal as D

from django.db import migrations

EFFECTIVE = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = "../shared/specs/vertex-context-cache.md §4 (researched 2026-11-30)"

GEMINI_RULE = (
    "Vertex: cache creation bills at the standard input price (writes = input); explicit "
    "cache hits 90% off on Gemini 2.5+; storage per 1M tokens per hour; the >200k tier is "
    "chosen per request by prompt size."
)

PRICES = [
    # provider, model, input, cached, write5m, write1h, storage, output, long tier, source
    ("vertex", "gemini-2.5-pro", D("1.25"), D("0.125"), D("1.25"), D("1.25"), D("4.50"),
     D("10"), (200_000, D("2.50"), D("0.25"), D("2.50"), D("2.50"), D("15")),
     f"{SPEC}: gemini-2.5-pro input 1.25/2.50, cached 0.125/0.25, storage 4.50, output "
     "10/15 (discuss.ai.google.dev/t/107349; discuss/t/172194; deploybase.ai Mar 2026). "
     + GEMINI_RULE),
    ("vertex", "gemini-2.5-flash", D("0.30"), D("0.03"), D("0.30"), D("0.30"), D("1.00"),
     D("2.50"), None,
     f"{SPEC}: gemini-2.5-flash input 0.30 (text/img/video), cached 0.03 (derived: 10%), "
     "storage 1.00, output 2.50 (deploybase.ai Mar 2026; hivebook.wiki for storage). "
     + GEMINI_RULE),
    ("vertex", "gemini-2.5-flash-lite", D("0.10"), D("0.01"), D("0.10"), D("0.10"), D("1.00"),
     D("0.40"), None,
     f"{SPEC}: gemini-2.5-flash-lite input 0.10, cached 0.01 (derived), storage 1.00, "
     "output 0.40 (cloudzero.com 2026; hivebook.wiki for storage). " + GEMINI_RULE),
    ("vertex", "gemini-3-pro-preview", D("2"), D("0.20"), D("2"), D("2"), D("4.50"), D("12"),
     (200_000, D("4"), D("0.40"), D("4"), D("4"), D("18")),
     f"{SPEC}: gemini-3-pro-preview input 2/4, cached 0.20/0.40, storage 4.50 "
     "(unconfirmed), output 12/18 (laozhang blog 2026-03-28). " + GEMINI_RULE),
    ("vertex", "gemini-3.1-pro-preview", D("2"), D("0.20"), D("2"), D("2"), D("4.50"),
     D("12"), (200_000, D("4"), D("0.40"), D("4"), D("4"), D("18")),
     f"{SPEC}: gemini-3.1-pro-preview input 2/4, cached 0.20/0.40 (derived), storage not "
     "found (spec: likely 4.50, seeded as 4.50), output 12/18 (cloudprice.net; laozhang "
     "2026-03-28; techjacksolutions 2026-06-09). " + GEMINI_RULE),
    ("vertex", "gemini-3-flash-preview", D("0.50"), D("0.05"), D("0.50"), D("0.50"),
     D("1.00"), D("3.00"), None,
     f"{SPEC}: gemini-3-flash-preview input 0.50 (text/img/video), cached 0.05, storage not "
     "found (spec: likely 1.00, seeded as 1.00), output 3.00 (factquire.com 2026-07-04; "
     "pi.dev). " + GEMINI_RULE),
    ("anthropic", "claude-sonnet-4-5", D("3.00"), D("0.30"), D("3.75"), D("6.00"), D("0"),
     D("15.00"), None,
     "Multipliers from ../shared/specs/vertex-context-cache.md §6: cache write 5 min 1.25x, "
     "1 h 2x, read 0.1x of base input (synaps pricing module 'as of 2026-06' citing "
     "anthropic.com/pricing; claude-session-parser; portkey). Base input $3.00 and output "
     "$15.00 per MTok are stated by Cacheplane (anthropic.com/pricing, Claude Sonnet 4.5), "
     "as in DOMAIN.md's $3.00/$0.30 example; confirm before billing. No storage fee."),
    ("anthropic", "claude-haiku-4-5", D("1.00"), D("0.10"), D("1.25"), D("2.00"), D("0"),
     D("5.00"), None,
     "Multipliers from ../shared/specs/vertex-context-cache.md §6 (1.25x / 2x / 0.1x). Base "
     "input $1.00 and output $5.00 per MTok stated by Cacheplane (anthropic.com/pricing, "
     "Claude Haiku 4.5); confirm before billing."),
    ("openai", "gpt-5", D("1.25"), D("0.125"), D("1.25"), D("1.25"), D("0"), D("10.00"),
     None,
     "OpenAI rule from ../shared/specs/vertex-context-cache.md §6: automatic caching from "
     "1,024 tokens, no write premium before GPT-5.6 (writes = input), read discount per "
     "model (90% here). Base $1.25 input, $0.125 cached, $10.00 output per MTok stated by "
     "Cacheplane (openai.com/api/pricing); confirm before billing."),
    ("openai", "gpt-4o", D("2.50"), D("1.25"), D("2.50"), D("2.50"), D("0"), D("10.00"), None,
     "OpenAI rule from ../shared/specs/vertex-context-cache.md §6 (older models: 0.5x read, "
     "per openrouter; no write premium). Base $2.50 input, $1.25 cached, $10.00 output per "
     "MTok stated by Cacheplane (openai.com/api/pricing); confirm before billing."),
]


def seed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    for provider, model, inp, cached, w5, w1, storage, output, long_tier, source in PRICES:
        if ModelPrice.objects.filter(provider=provider, model=model).exists():
            continue
        long_fields = {}
        if long_tier is not None:
            threshold, l_in, l_cached, l_w5, l_w1, l_out = long_tier
            long_fields = {
                "long_threshold_tokens": threshold,
                "long_input_per_mtok": l_in,
                "long_cached_input_per_mtok": l_cached,
                "long_cache_write_5m_per_mtok": l_w5,
                "long_cache_write_1h_per_mtok": l_w1,
                "long_output_per_mtok": l_out,
            }
        ModelPrice.objects.create(
            provider=provider, model=model, version=1, effective_from=EFFECTIVE,
            input_per_mtok=inp, cached_input_per_mtok=cached, cache_write_5m_per_mtok=w5,
            cache_write_1h_per_mtok=w1, storage_per_mtok_hour=storage, output_per_mtok=output,
            source=source, note="seeded by migration billing.0002", **long_fields,
        )


def unseed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    ModelPrice.objects.filter(note="seeded by migration billing.0002", version=1).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
