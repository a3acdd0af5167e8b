"""Seed what providers publish and version 1 could not say, as corrections and new keys.

- Claude Sonnet 4.5 long context: a request with more than 200k input tokens (cache reads
  and writes included) pays 2x input and 1.5x output on every line: input $6.00, 5-minute
  write $7.50, 1-hour write $12.00, read $0.60, output $22.50 per MTok (anthropic.com
  pricing, "long context pricing" for Sonnet 4/4.5 with the 1M context window; stated by
  Cacheplane, confirm before billing).
- Gemini audio input (../shared/specs/vertex-context-cache.md §4): 2.5 Flash audio $1.00,
  cached audio $0.10 (derived, 10%); 2.5 Flash-Lite audio $0.30, cached audio $0.03
  (derived). Thinking tokens are billed at the output rate (Gemini 2.5 pricing: "output
  price including thinking tokens"), which is the default when no thinking rate is set.
- DeepSeek (api-docs.deepseek.com/quick_start/pricing as published in 2025; stated by
  Cacheplane, confirm before billing): deepseek-chat cache hit $0.07, miss $0.27, output
  $1.10; deepseek-reasoner hit $0.14, miss $0.55, output $2.19; off-peak 16:30-00:30 UTC
  at 50 % (chat) and 75 % (reasoner) off. Caching is automatic (64-token blocks), no
  storage fee, misses are plain input.
- The default vLLM pool (``workers.Worker.pool`` defaults to ``"default"``): a GPU-hour
  chargeback from the configured ``CACHEPLANE_VLLM_DEFAULT_*`` settings (see
  ``.env.example``), seeded once; set a pool's own price through the API.

Corrections follow the price-book rule: the seeded version is kept, superseded, and the
corrected one covers the same range (``billing reprice`` then recomputes usage).
"""

from datetime import UTC, datetime
from decimal import Decimal as D

from django.conf import settings
from django.db import migrations

EFFECTIVE = datetime(2026, 1, 1, tzinfo=UTC)
NOTE = "seeded by migration billing.0004"

CORRECTIONS = {
    ("anthropic", "claude-sonnet-4-5"): {
        "long_threshold_tokens": 200_000,
        "long_threshold_basis": "prompt",
        "long_input_per_mtok": D("6.00"),
        "long_cached_input_per_mtok": D("0.60"),
        "long_cache_write_5m_per_mtok": D("7.50"),
        "long_cache_write_1h_per_mtok": D("12.00"),
        "long_output_per_mtok": D("22.50"),
    },
    ("vertex", "gemini-2.5-flash"): {
        "audio_input_per_mtok": D("1.00"),
        "audio_cached_input_per_mtok": D("0.10"),
    },
    ("vertex", "gemini-2.5-flash-lite"): {
        "audio_input_per_mtok": D("0.30"),
        "audio_cached_input_per_mtok": D("0.03"),
    },
}

CORRECTION_SOURCES = {
    ("anthropic", "claude-sonnet-4-5"): (
        "Long context (anthropic.com pricing, Sonnet 4/4.5 with the 1M window): above 200k "
        "input tokens (cache reads and writes included) every line pays input $6.00, "
        "writes $7.50 / $12.00, reads $0.60, output $22.50 per MTok. Stated by Cacheplane."
    ),
    ("vertex", "gemini-2.5-flash"): (
        "Audio input $1.00 (spec §4), cached audio $0.10 (derived: 10%)."
    ),
    ("vertex", "gemini-2.5-flash-lite"): (
        "Audio input $0.30 (spec §4), cached audio $0.03 (derived: 10%)."
    ),
}

DEEPSEEK = [
    ("deepseek-chat", D("0.27"), D("0.07"), D("1.10"), 50),
    ("deepseek-reasoner", D("0.55"), D("0.14"), D("2.19"), 75),
]
DEEPSEEK_SOURCE = (
    "api-docs.deepseek.com/quick_start/pricing (2025 price list): input cache hit {hit}, "
    "cache miss {miss}, output {out} USD per 1M tokens; off-peak 16:30-00:30 UTC {pct}% "
    "off. Stated by Cacheplane; confirm against the live page before billing."
)

COPY_FIELDS = (
    "input_per_mtok",
    "cached_input_per_mtok",
    "cache_write_5m_per_mtok",
    "cache_write_1h_per_mtok",
    "storage_per_mtok_hour",
    "output_per_mtok",
    "long_threshold_tokens",
    "long_input_per_mtok",
    "long_cached_input_per_mtok",
    "long_cache_write_5m_per_mtok",
    "long_cache_write_1h_per_mtok",
    "long_output_per_mtok",
    "long_threshold_basis",
    "long_storage_per_mtok_hour",
    "thinking_per_mtok",
    "audio_input_per_mtok",
    "audio_cached_input_per_mtok",
    "audio_output_per_mtok",
    "time_discounts",
)


def _setting(name: str, default: str) -> D:
    return D(str(getattr(settings, name, default)))


def seed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    PoolPrice = apps.get_model("billing", "PoolPrice")
    now = datetime.now(tz=UTC)
    for (provider, model), changes in CORRECTIONS.items():
        old = ModelPrice.objects.filter(
            provider=provider, model=model, version=1, superseded_at__isnull=True
        ).first()
        if old is None or old.note != "seeded by migration billing.0002":
            continue  # an operator already changed it: leave their book alone
        values = {name: getattr(old, name) for name in COPY_FIELDS}
        values.update(changes)
        # Superseded first: the exclusion constraint only admits one live version.
        old.superseded_at = now
        old.save(update_fields=["superseded_at"])
        new = ModelPrice.objects.create(
            provider=provider,
            model=model,
            version=2,
            effective_from=old.effective_from,
            effective_to=old.effective_to,
            source=f"{old.source} Corrected by billing.0004: {CORRECTION_SOURCES[provider, model]}",
            note=NOTE,
            **values,
        )
        old.superseded_by = new
        old.save(update_fields=["superseded_by"])
    for model, miss, hit, out, pct in DEEPSEEK:
        if ModelPrice.objects.filter(provider="deepseek", model=model).exists():
            continue
        ModelPrice.objects.create(
            provider="deepseek",
            model=model,
            version=1,
            effective_from=EFFECTIVE,
            input_per_mtok=miss,
            cached_input_per_mtok=hit,
            cache_write_5m_per_mtok=miss,
            cache_write_1h_per_mtok=miss,
            storage_per_mtok_hour=D(0),
            output_per_mtok=out,
            time_discounts=[{"start": "16:30", "end": "00:30", "percent": pct}],
            source=DEEPSEEK_SOURCE.format(hit=hit, miss=miss, out=out, pct=pct),
            note=NOTE,
        )
    if not PoolPrice.objects.filter(pool="default").exists():
        PoolPrice.objects.create(
            pool="default",
            version=1,
            effective_from=EFFECTIVE,
            gpu_hour_usd=_setting("CACHEPLANE_VLLM_DEFAULT_GPU_HOUR_USD", "2.50"),
            prefill_tokens_per_gpu_second=_setting(
                "CACHEPLANE_VLLM_DEFAULT_PREFILL_TOKENS_PER_GPU_SECOND", "4600"
            ),
            decode_tokens_per_gpu_second=_setting(
                "CACHEPLANE_VLLM_DEFAULT_DECODE_TOKENS_PER_GPU_SECOND", "1500"
            ),
            kv_blocks_per_gpu=int(
                _setting("CACHEPLANE_VLLM_DEFAULT_KV_BLOCKS_PER_GPU", "2000")
            ),
            kv_block_tokens=16,
            source=(
                "Default GPU-hour chargeback (CACHEPLANE_VLLM_DEFAULT_* settings): $/GPU-hour "
                "as configured; prefill throughput from DOMAIN.md's measured 70B-on-2xH100 "
                "figure (64k tokens uncached in 7.1 s = 4.6k tokens per GPU-second); decode "
                "1.5k tokens per GPU-second batched; 2,000 KV blocks of 16 tokens per GPU "
                "(320 KB per token, ~10 GB of KV memory per GPU). Replace with the pool's "
                "own measured figures."
            ),
            note=NOTE,
        )


def unseed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    PoolPrice = apps.get_model("billing", "PoolPrice")
    for price in ModelPrice.objects.filter(note=NOTE, version=2):
        ModelPrice.objects.filter(superseded_by=price).update(
            superseded_at=None, superseded_by=None
        )
        price.delete()
    ModelPrice.objects.filter(note=NOTE).delete()
    PoolPrice.objects.filter(note=NOTE).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_nano_ledger_modalities_ttl_profile")]

    operations = [migrations.RunPython(seed, unseed)]
