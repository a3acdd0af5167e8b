"""The one strict JSON reader refuses what would otherwise become a 500 later."""

from __future__ import annotations

import pytest

from controlplane.strict_json import StrictJsonError, check_value, loads_strict


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper"),
        ("[" * 65 + "]" * 65, "nests deeper"),
        ('{"temperature": NaN}', "NaN"),
        ('{"x": -Infinity}', "Infinity"),
        ("1e999", "out of range"),
        ('{"name": "a\\u0000b"}', "NUL"),
        ('{"name": "\\ud800"}', "surrogate"),
        ('{"\\udc00": 1}', "object key"),
        (b"\xff\xfe", "UTF-8"),
        ("{", "not valid JSON"),
    ],
)
def test_loads_strict_refuses_input_that_would_fail_later(raw, fragment):
    with pytest.raises(StrictJsonError) as caught:
        loads_strict(raw)
    assert caught.value.code == "invalid_json"
    assert fragment in caught.value.message


def test_loads_strict_accepts_ordinary_documents_up_to_the_depth_limit():
    assert loads_strict('{"a": [1, 2.5, "\\u00e9", {"b": null}]}') == {
        "a": [1, 2.5, "é", {"b": None}]
    }
    assert loads_strict("[" * 64 + "]" * 64) is not None
    assert loads_strict('"\\ud83d\\ude00"') == "😀"  # a valid surrogate pair


def test_check_value_walks_query_values_too():
    with pytest.raises(StrictJsonError):
        check_value({"filter": ["ok", "bad\x00"]})
    check_value({"filter": ["ok"]})


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1, "a": 2}', '{"x": {"model": "a", "model": "b"}}', '[{"k": 1, "k": 1}]'],
)
def test_duplicate_keys_in_an_object_are_refused(raw):
    with pytest.raises(StrictJsonError, match="Duplicate key"):
        loads_strict(raw)


def test_duplicate_keys_are_a_400_on_the_rest_api(api, tenant_a, admin_a):
    api.force_login(admin_a)
    response = api.post(
        f"/api/v1/tenants/{tenant_a.slug}/rate-limits",
        data='{"requests_per_minute": 5, "requests_per_minute": 999999}',
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_json"
