"""The console's provider-key forms: add a tenant's key for a hosted provider, rotate it,
switch its cache autopilot.

The key's rules (8-512 printable characters, no spaces) are the service's
(``gateway.provider_credentials``), one rule for every entry point; a form only bounds the
length, as the API's serializer does, and the service's error lands next to the field.

Every form that takes a key carries "secret" in its prefix, so each of its posted field
names contains it:
``frontend.views.login_required`` never parks a field so named in the session when a
form is posted after the session expired, and a provider key must not wait there.
The key's widget never renders its value back, so a refused post does not echo it.
"""

from __future__ import annotations

from typing import Any

from django import forms

from gateway.models import HostedProvider
from gateway.provider_credentials import MAX_SECRET_CHARS

#: Prefix of the add form (the rotate forms use :func:`rotate_prefix`).
ADD_PREFIX = "new-secret"

_AUTOPILOT_HELP = (
    "The gateway places cache breakpoints (Anthropic) or sets prompt_cache_key (OpenAI) "
    "on this tenant's requests to the provider."
)


def rotate_prefix(provider: str) -> str:
    return f"{provider}-secret"


def _key_field(label: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=MAX_SECRET_CHARS,
        strip=False,  # a stray space is the service's error to report, not ours to drop
        help_text="8-512 printable characters, no spaces. Stored encrypted and never shown again.",
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "off", "spellcheck": "false"}
        ),
    )


class ProviderCredentialAddForm(forms.Form):
    provider = forms.ChoiceField(label="Provider")
    api_key = _key_field("API key")
    cache_autopilot = forms.BooleanField(
        required=False, initial=True, label="Cache autopilot", help_text=_AUTOPILOT_HELP
    )

    def __init__(self, *args: Any, providers: list[str], **kwargs: Any) -> None:
        kwargs.setdefault("prefix", ADD_PREFIX)
        super().__init__(*args, **kwargs)
        field = self.fields["provider"]
        assert isinstance(field, forms.ChoiceField)  # declared as one above
        labels = dict(HostedProvider.choices)
        field.choices = [(p, labels[p]) for p in providers]


class ProviderCredentialRotateForm(forms.Form):
    api_key = _key_field("New API key")

    def __init__(self, *args: Any, provider: str, **kwargs: Any) -> None:
        kwargs.setdefault("prefix", rotate_prefix(provider))
        super().__init__(*args, **kwargs)


class ProviderCredentialAutopilotForm(forms.Form):
    cache_autopilot = forms.ChoiceField(choices=[("on", "on"), ("off", "off")])

    def enabled(self) -> bool:
        return bool(self.cleaned_data["cache_autopilot"] == "on")
