"""Seed the Gemini 3 Flash audio input rates, which version 1 of its price left out.

../shared/specs/vertex-context-cache.md §4: gemini-3-flash-preview "0.50 text/img/video;
1.00 audio" input per MTok, cached 0.05 (text). The cached audio rate is derived as for
Gemini 2.5 Flash (billing.0004): 10 % of the audio input rate, $0.10. Without these rates
audio input was priced at the text rate (−50 % on an all-audio prompt).

A correction in the price-book way: the seeded version is superseded, and the corrected one
covers the same range (``billing reprice`` then recomputes usage). A price an operator
already changed is left alone.
"""

from datetime import UTC, datetime
from decimal import Decimal as D

from django.db import migrations

NOTE = "seeded by migration billing.0005"
SEEDED_BY = ("seeded by migration billing.0002", "seeded by migration billing.0004")
PROVIDER, MODEL = "vertex", "gemini-3-flash-preview"
CHANGES = {"audio_input_per_mtok": D("1.00"), "audio_cached_input_per_mtok": D("0.10")}
SOURCE = "Audio input $1.00 (spec §4), cached audio $0.10 (derived: 10%)."
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


def seed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    live = ModelPrice.objects.filter(
        provider=PROVIDER, model=MODEL, superseded_at__isnull=True
    ).order_by("-version")
    for old in live:
        if old.note not in SEEDED_BY or old.audio_input_per_mtok is not None:
            continue  # an operator already changed it, or it has audio rates
        values = {name: getattr(old, name) for name in COPY_FIELDS}
        values.update(CHANGES)
        # Superseded first: the exclusion constraint only admits one live version.
        old.superseded_at = datetime.now(tz=UTC)
        old.save(update_fields=["superseded_at"])
        top = ModelPrice.objects.filter(provider=PROVIDER, model=MODEL).order_by("-version")
        new = ModelPrice.objects.create(
            provider=PROVIDER,
            model=MODEL,
            version=top.values_list("version", flat=True)[0] + 1,
            effective_from=old.effective_from,
            effective_to=old.effective_to,
            source=f"{old.source} Corrected by billing.0005: {SOURCE}",
            note=NOTE,
            **values,
        )
        old.superseded_by = new
        old.save(update_fields=["superseded_by"])


def unseed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    for price in ModelPrice.objects.filter(note=NOTE):
        ModelPrice.objects.filter(superseded_by=price).update(
            superseded_at=None, superseded_by=None
        )
        price.delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_seed_published_tiers_deepseek_default_pool")]

    operations = [migrations.RunPython(seed, unseed)]
