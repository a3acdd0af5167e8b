"""Console forms: parse and check browser input, then the view calls the same service the
REST API calls (so rules, errors and audit events are identical).

Field rules mirror the API's input serializers; the free-text rule is the shared
``display_text_validator``. Domain errors a service raises are attached to the field they
concern (``FIELD_FOR_CODE``) so the message appears next to it.
"""

from __future__ import annotations

from typing import Any

from django import forms

from billing.models import Provider as PriceProvider
from caches.models import Provider, TtlPolicy
from controlplane.display_text import display_text_validator
from tenants.models import SLUG_VALIDATOR

# Domain error code -> form field it is shown next to (else: at the top of the form;
# "" pins an error to the top even when its details name a field).
FIELD_FOR_CODE = {
    "ttl_below_provider_minimum": "ttl_seconds",
    "budget_exceeded": "",
    "budget_near_limit": "",
    "unknown_principal": "principal",
    "unknown_role": "role",
    "invalid_expiry": "expires_at",
    "duplicate_name": "name",
    "invalid_period": "period",
    "invalid_threshold": "thresholds",
    "invalid_webhook": "webhook_url",
    "invalid_ttl": "ttl_seconds",
    "invalid_cron": "prewarm_cron",
    "unknown_model": "model",
    "unknown_permission": "permissions",
    "rate_limit_exists": "api_key",
}

#: A price's quoted source text: the API's limit (``billing.api.serializers.prices``); the
#: model's field is unbounded text, and seeded prices quote whole paragraphs.
SOURCE_MAX_LENGTH = 2000


class _QuotedTextField(forms.CharField):
    """Text from a textarea with the line breaks it was written with: browsers submit
    CRLF, the stored text (and the API's) uses LF."""

    def to_python(self, value: Any) -> str:
        return str(super().to_python(value)).replace("\r\n", "\n")


def _source() -> forms.CharField:
    """A price's source, as the API takes it: quoted text, line breaks included (the
    seeded prices quote their published pages), up to ``SOURCE_MAX_LENGTH``; platform
    operators write it and every page escapes it."""
    return _QuotedTextField(
        max_length=SOURCE_MAX_LENGTH,
        label="Source (URL or note)",
        widget=forms.Textarea(attrs={"rows": 3}),
    )


DATETIME_WIDGET = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]


def _set_choices(form: forms.Form, name: str, choices: list[tuple[str, Any]]) -> None:
    """Fill a choice field's options at bind time (they depend on the tenant)."""
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)  # declared as one on the form class
    field.choices = choices


def _text(max_length: int, *, required: bool = True, label: str | None = None) -> forms.CharField:
    return forms.CharField(
        max_length=max_length,
        required=required,
        label=label,
        validators=[display_text_validator],
    )


class TenantCreateForm(forms.Form):
    slug = forms.CharField(max_length=40, validators=[SLUG_VALIDATOR], help_text="URL name.")
    display_name = _text(200, label="Name")
    admin = forms.CharField(
        max_length=150, required=False, label="Admin (username)", help_text="Optional."
    )


class TenantRenameForm(forms.Form):
    display_name = _text(200, label="Name")


class TenantStateForm(forms.Form):
    reason = _text(500, required=False)


class HumanCreateForm(forms.Form):
    username = forms.RegexField(r"^[A-Za-z0-9@.+_-]{3,150}$", max_length=150)
    email = forms.EmailField(required=False)
    password = forms.CharField(
        min_length=12, max_length=200, required=False, widget=forms.PasswordInput
    )


class MemberAddForm(forms.Form):
    principal = forms.CharField(
        max_length=150,
        label="Username",
        help_text="A person, or one of this tenant's service accounts (sa.<tenant>.<name>).",
        widget=forms.TextInput(attrs={"list": "principal-options", "autocomplete": "off"}),
    )
    role = forms.ChoiceField()
    expires_at = forms.DateTimeField(
        required=False,
        widget=DATETIME_WIDGET,
        input_formats=DATETIME_FORMATS,
        label="Expires (UTC)",
    )

    def __init__(self, *args: Any, roles: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _set_choices(self, "role", [(r, r) for r in roles])
        if "tenant.viewer" in roles:  # least privilege unless chosen otherwise
            self.fields["role"].initial = "tenant.viewer"


class ServiceAccountForm(forms.Form):
    name = forms.RegexField(
        r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$",
        max_length=40,
        help_text="Lower case, digits and dashes.",
        error_messages={"invalid": "Use 3-40 lower-case letters, digits and dashes."},
    )
    description = _text(500, required=False)


class RoleCreateForm(forms.Form):
    name = forms.RegexField(
        r"^[a-zA-Z][a-zA-Z0-9_.-]{2,63}$",
        max_length=64,
        error_messages={"invalid": "Start with a letter; letters, digits, _ . - only."},
    )
    title = _text(200)
    description = _text(500, required=False)
    permissions = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args: Any, permissions: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _set_choices(self, "permissions", [(p, p) for p in permissions])


class ApiKeyCreateForm(forms.Form):
    name = _text(100)
    principal = forms.ChoiceField(
        required=False, label="For", help_text="Yourself or a service account."
    )
    expires_at = forms.DateTimeField(
        required=False,
        widget=DATETIME_WIDGET,
        input_formats=DATETIME_FORMATS,
        label="Expires (UTC)",
    )

    def __init__(self, *args: Any, accounts: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _set_choices(self, "principal", [("", "myself"), *accounts])


class BudgetForm(forms.Form):
    name = _text(100)
    period = forms.ChoiceField(choices=[("month", "month"), ("day", "day")])
    limit_usd = forms.DecimalField(
        min_value=0, max_digits=14, decimal_places=6, label="Limit (USD)"
    )
    thresholds = forms.CharField(
        max_length=200, initial="50, 80, 100", help_text="Whole percentages, comma separated."
    )
    hard_limit = forms.BooleanField(required=False, initial=True, label="Refuse requests over it")
    webhook_url = forms.CharField(max_length=2000, required=False, label="Alert webhook URL")

    def clean_thresholds(self) -> list[int]:
        raw = [p.strip().rstrip("%").strip() for p in self.cleaned_data["thresholds"].split(",")]
        try:
            return [int(p) for p in raw if p]
        except ValueError:
            raise forms.ValidationError("Use whole numbers such as 50, 80, 100.") from None


class BudgetEditForm(BudgetForm):
    """Editing a budget: the period is immutable (the service refuses a change)."""

    period = None  # type: ignore[assignment]


def _limit(label: str, help_text: str, *, maximum: int = 2**31 - 1) -> forms.IntegerField:
    # The column's range (integer; tokens per minute is a bigint): above it was a 500.
    return forms.IntegerField(
        required=False, min_value=1, max_value=maximum, label=label, help_text=help_text
    )


class RateLimitEditForm(forms.Form):
    """The limits of one scope; an empty field is unlimited (the API's null)."""

    requests_per_minute = _limit("Requests per minute", "Empty: unlimited.")
    tokens_per_minute = _limit(
        "Tokens per minute", "Prompt + output tokens. Empty: unlimited.", maximum=10**12
    )
    concurrent_requests = _limit("Concurrent requests", "In flight at once. Empty: unlimited.")
    weight = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1000,
        initial=1,
        label="Fair-share weight",
        help_text="The tenant's share of a saturated worker pool (tenant-wide limit only).",
    )

    def __init__(self, *args: Any, for_key: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if for_key:
            del self.fields["weight"]  # the service refuses a weight on a key's limit

    def values(self) -> dict[str, Any]:
        """The service's ``values``/``changes``: every shown field, None for unlimited."""
        data = self.cleaned_data
        values = {name: data.get(name) for name in self.fields}
        if "weight" in values and values["weight"] is None:
            values["weight"] = 1
        return values


class RateLimitForm(RateLimitEditForm):
    """A new limit: for the whole tenant or for one of its keys."""

    api_key = forms.ChoiceField(required=False, label="Applies to")
    field_order = ["api_key"]

    def __init__(self, *args: Any, keys: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_keys(keys)
        self.order_fields(["api_key", *[n for n in self.fields if n != "api_key"]])

    def set_keys(self, keys: list[tuple[str, str]]) -> None:
        _set_choices(self, "api_key", [("", "the whole tenant"), *keys])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("api_key") and data.get("weight") not in (None, 1):
            self.add_error("weight", "The weight applies to the tenant-wide limit only.")
        return data

    def values(self) -> dict[str, Any]:
        values = super().values()
        values.pop("api_key", None)
        if self.cleaned_data.get("api_key"):
            values.pop("weight", None)
        return values


class CacheCreateForm(forms.Form):
    name = forms.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        max_length=100,
        error_messages={"invalid": "Letters, digits, . _ - (up to 100), starting alphanumeric."},
    )
    provider = forms.ChoiceField(choices=Provider.choices)
    model = forms.ChoiceField(help_text="The catalog's models of the chosen provider.")
    system_instruction = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}), strip=False, label="System instruction"
    )
    document = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        required=False,
        strip=False,
        label="Document text (optional)",
    )
    ttl_seconds = forms.IntegerField(min_value=1, initial=3600, label="TTL (seconds)")
    ttl_policy = forms.ChoiceField(choices=TtlPolicy.choices, initial=TtlPolicy.FIXED)

    def __init__(self, *args: Any, models: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.models = models
        labels = dict(Provider.choices)
        _set_choices(
            self,
            "model",
            [
                (str(labels.get(provider, provider)), [(m, m) for m in names])
                for provider, names in models.items()
                if names
            ],
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        provider, model = data.get("provider"), data.get("model")
        if provider and model and model not in self.models.get(provider, []):
            label = dict(Provider.choices).get(provider, provider)
            self.add_error("model", f"{model} is not a {label} model: choose one of its models.")
        return data

    def content(self) -> dict[str, Any]:
        data = self.cleaned_data
        documents = []
        if data.get("document"):
            documents.append({"id": "doc-1", "chunk": 0, "text": data["document"]})
        return {
            "system_instruction": data.get("system_instruction", ""),
            "tools": [],
            "documents": documents,
        }


class CacheExtendForm(forms.Form):
    extend_by = forms.IntegerField(min_value=60, label="Extend by (seconds)", initial=3600)


class CacheSetTtlForm(forms.Form):
    ttl_seconds = forms.IntegerField(min_value=1, label="TTL from now (seconds)")


class CachePolicyForm(forms.Form):
    ttl_policy = forms.ChoiceField(choices=TtlPolicy.choices, label="TTL policy")


class ModelPriceForm(forms.Form):
    # vLLM traffic is priced by its worker pool's GPU-hour price (the pool form), never by
    # a per-token model price, so the model form does not offer it.
    provider = forms.ChoiceField(
        choices=[(v, label) for v, label in PriceProvider.choices if v != PriceProvider.VLLM]
    )
    model = forms.CharField(max_length=200)
    input_per_mtok = forms.DecimalField(
        min_value=0, max_digits=14, decimal_places=6, label="Input $/Mtok"
    )
    cached_input_per_mtok = forms.DecimalField(
        min_value=0, max_digits=14, decimal_places=6, label="Cached input $/Mtok"
    )
    output_per_mtok = forms.DecimalField(
        min_value=0, max_digits=14, decimal_places=6, label="Output $/Mtok"
    )
    storage_per_mtok_hour = forms.DecimalField(
        min_value=0, max_digits=14, decimal_places=6, label="Storage $/Mtok·h"
    )
    source = _source()


class PriceCorrectForm(ModelPriceForm):
    provider = None  # type: ignore[assignment]
    model = None  # type: ignore[assignment]
    note = _text(500, label="Why (note)")


class PoolPriceForm(forms.Form):
    pool = forms.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100, initial="default", label="Pool"
    )
    gpu_hour_usd = forms.DecimalField(min_value=0, max_digits=14, decimal_places=6, label="GPU $/h")
    prefill_tokens_per_gpu_second = forms.DecimalField(
        min_value=0.001, max_digits=16, decimal_places=3, label="Prefill tokens/GPU·s"
    )
    decode_tokens_per_gpu_second = forms.DecimalField(
        min_value=0.001, max_digits=16, decimal_places=3, label="Decode tokens/GPU·s"
    )
    kv_blocks_per_gpu = forms.IntegerField(min_value=1, label="KV blocks per GPU")
    kv_block_tokens = forms.IntegerField(min_value=1, initial=16, label="Tokens per KV block")
    source = _source()


class PoolPriceCorrectForm(PoolPriceForm):
    pool = None  # type: ignore[assignment]
    note = _text(500, label="Why (note)")
