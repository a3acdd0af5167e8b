"""No input reaches a 500 on REST: bodies, query filters, cursors, page sizes, types.

Each bad input gets a stable 400 code and writes nothing.
"""

from __future__ import annotations

import base64
import io
from urllib.parse import urlencode

import pytest

from audit.models import AuditEvent
from caches.models import CacheObject
from controlplane.api.parsers import PayloadTooLarge, StrictJSONParser
from tests.caches.conftest import big_content

pytestmark = pytest.mark.django_db


def _url(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/caches"


def _raw_post(api, tenant, raw: bytes):
    return api.generic("POST", _url(tenant), raw, content_type="application/json")


def _assert_refused(response, code: str, events_before: int) -> None:
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert not CacheObject.objects.all_tenants().exists()
    assert AuditEvent.objects.count() == events_before


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 5000 + b"]" * 5000,  # RecursionError in json.loads
        b'{"name": "c", "ttl_seconds": NaN}',
        b'{"name": "c", "ttl_seconds": 1e999}',
        b'{"name": "c\\u0000x"}',  # PostgreSQL text refuses NUL
        b'{"name": "\\ud800"}',  # a lone surrogate cannot be rendered as UTF-8
        b'{"\\u0000": 1}',
        b'{"name": "\xff\xfe"}',  # not UTF-8
        b'{"name": ',
    ],
    ids=["deep", "nan", "infinity", "nul", "surrogate", "nul-key", "not-utf8", "truncated"],
)
def test_a_bad_json_body_is_400_invalid_json_and_writes_nothing(
    api, tenant_a, admin_a, raw
) -> None:
    api.force_login(admin_a)
    events = AuditEvent.objects.count()
    _assert_refused(_raw_post(api, tenant_a, raw), "invalid_json", events)


@pytest.mark.parametrize(
    "body",
    [
        [1, 2, 3],
        "a string",
        {"name": ["not", "a", "string"], "provider": "vertex", "model": "gemini-2.5-flash"},
        {"name": "c", "provider": {"x": 1}, "model": "gemini-2.5-flash"},
        {"name": "c", "provider": "vertex", "model": "gemini-2.5-flash", "content": "text"},
        {
            "name": "c",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "content": big_content(),
            "ttl_seconds": "soon",
        },
        {
            "name": "c",
            "provider": "vertex",
            "model": "gemini-2.5-flash",
            "content": big_content(),
            "ttl_seconds": 10**40,
        },
    ],
    ids=["array", "string", "list-name", "object-provider", "string-content", "ttl-str", "ttl-big"],
)
def test_wrong_types_are_400_and_write_nothing(api, tenant_a, admin_a, body) -> None:
    api.force_login(admin_a)
    events = AuditEvent.objects.count()
    response = api.post(_url(tenant_a), body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] in {"invalid_input", "invalid_content", "invalid_ttl"}
    assert not CacheObject.objects.all_tenants().exists()
    assert AuditEvent.objects.count() == events


def test_a_body_over_the_limit_is_refused_while_reading_it(settings) -> None:
    # No Content-Length (a chunked body): the parser itself stops at the limit.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    parser = StrictJSONParser()
    with pytest.raises(PayloadTooLarge):
        parser.parse(io.BytesIO(b'{"a": "' + b"x" * 200_000 + b'"}'))
    assert parser.parse(io.BytesIO(b'{"a": 1}')) == {"a": 1}


@pytest.mark.parametrize(
    "query",
    ["model=%00", "state=active%00", "provider=%00vertex", "%00=1", "model=a%00b&state=active"],
)
def test_nul_in_a_query_filter_is_400_invalid_query(api, tenant_a, admin_a, query) -> None:
    api.force_login(admin_a)
    response = api.get(f"{_url(tenant_a)}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_query"


def _cursor(**tokens: str) -> str:
    return base64.b64encode(urlencode(tokens).encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "not-base64!!",
        base64.b64encode(b"\xff\xfe garbage").decode(),
        _cursor(p="not-a-timestamp"),
        _cursor(p="2026-13-45T99:99:99"),
        _cursor(p="\x00"),
        _cursor(p="99999-01-01T00:00:00+00:00"),
        _cursor(o="-5"),
        _cursor(r="maybe", p="2026-01-01T00:00:00+00:00"),
        "A" * 10_000,
    ],
)
def test_a_crafted_cursor_is_400_invalid_cursor_or_a_valid_page(
    api, tenant_a, admin_a, cursor
) -> None:
    api.force_login(admin_a)
    response = api.get(_url(tenant_a), {"cursor": cursor})
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"]["code"] in {"invalid_cursor", "invalid_query"}


@pytest.mark.parametrize("page_size", ["999999999999999999999999", "-1", "0", "abc", "1e9"])
def test_a_huge_or_odd_page_size_is_capped_not_an_error(api, tenant_a, admin_a, page_size) -> None:
    api.force_login(admin_a)
    response = api.get(_url(tenant_a), {"page_size": page_size})
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "cursor",
    [_cursor(p="not-a-number"), _cursor(p="\x00"), _cursor(p="1.5e3")],
)
def test_a_crafted_audit_events_cursor_is_400_invalid_cursor(
    api, tenant_a, admin_a, cursor
) -> None:
    api.force_login(admin_a)
    response = api.get(f"/api/v1/tenants/{tenant_a.slug}/audit/events", {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_cursor"
