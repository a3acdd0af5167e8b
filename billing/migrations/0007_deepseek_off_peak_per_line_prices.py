"""DeepSeek's off-peak window priced per line, as published (api-docs.deepseek.com
quick_start/pricing, 2025): 16:30-00:30 UTC, both models at cache hit $0.035, miss
$0.135, output $0.550 per 1M tokens. 0004 seeded it as 50 % / 75 % off every rate, which
is exact for deepseek-chat but not for deepseek-reasoner (0.1375 / 0.5475 instead of
0.135 / 0.550). Only the rows 0004 seeded (unchanged windows) are rewritten."""

from django.db import migrations

OFF_PEAK = {"input": "0.135", "cached_input": "0.035", "output": "0.550"}
SEEDED = {"deepseek-chat": 50, "deepseek-reasoner": 75}


def forwards(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    for model, percent in SEEDED.items():
        seeded = [{"start": "16:30", "end": "00:30", "percent": percent}]
        for price in ModelPrice.objects.using(schema_editor.connection.alias).filter(provider="deepseek", model=model):
            if price.time_discounts == seeded:
                price.time_discounts = [{**seeded[0], "rates": OFF_PEAK}]
                price.save(update_fields=["time_discounts"])


def backwards(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    for model, percent in SEEDED.items():
        window = {"start": "16:30", "end": "00:30", "percent": percent, "rates": OFF_PEAK}
        for price in ModelPrice.objects.using(schema_editor.connection.alias).filter(provider="deepseek", model=model):
            if price.time_discounts == [window]:
                price.time_discounts = [{k: v for k, v in window.items() if k != "rates"}]
                price.save(update_fields=["time_discounts"])


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_ledger_keys_nano_budgets_estimates")]

    operations = [migrations.RunPython(forwards, backwards)]
