"""The console's worker registration form (platform admins; vLLM and reference workers).

Apart from frontend/forms.py because a worker's registration carries its own fields (engine,
version, KV-events endpoints, hash seed, tokenizer, sealed API key).
"""

from __future__ import annotations

from django import forms


class WorkerRegisterForm(forms.Form):
    name = forms.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100)
    base_url = forms.URLField(max_length=300, label="Base URL", assume_scheme="http")
    model = forms.CharField(max_length=200)
    pool = forms.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100, initial="default")
    engine = forms.ChoiceField(choices=[("vllm", "vLLM"), ("reference", "Reference worker")])
    engine_version = forms.CharField(max_length=40, required=False, label="Engine version")
    kv_events_endpoint = forms.CharField(
        max_length=200,
        required=False,
        label="KV events (PUB[,REPLAY])",
        help_text="As vLLM binds them, e.g. tcp://*:5557,tcp://*:5558",
    )
    hash_seed = forms.CharField(
        max_length=64, required=False, initial="0", label="Hash seed (PYTHONHASHSEED)"
    )
    tokenizer = forms.CharField(
        max_length=500, required=False, label="Tokenizer (model dir or tokenizer.json)"
    )
    api_key = forms.CharField(
        max_length=500,
        required=False,
        strip=False,
        label="API key (blank: keep)",
        widget=forms.PasswordInput(render_value=False),
    )
    dev_mode = forms.BooleanField(required=False, label="Dev-mode endpoints")

    def clean_api_key(self) -> str | None:
        return self.cleaned_data.get("api_key") or None  # blank keeps the stored key
