"""The ``projects.locations.cachedContents`` rules: create, get, list, patch, delete (spec §1).

Everything here is transport-free: inputs are the decoded JSON body and path parts, outputs are
JSON-ready dicts, failures are :class:`RpcError`. Messages quoted by the spec are verbatim;
every other message is our wording, since Vertex's is not documented.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from .cached_content_fields import (
    expiry_from,
    kms_key_name_from,
    normalize_cached_content,
    require,
    update_mask_paths,
    validate_inputs,
)
from .model_catalog import ModelCatalog, parse_model_name
from .page_tokens import decode_page_token, encode_page_token, sort_key
from .rpc_errors import (
    below_minimum_tokens,
    cached_content_not_found,
    invalid_argument,
    publisher_model_not_found,
)
from .store import CacheStore, StoredCache
from .token_estimator import estimate_cached_content_tokens, text_character_count

# Spec §1.2: "Inline content is limited to 10 MB". We read MB as MiB and apply it to the whole
# request body, which is what a front end can check before parsing.
DEFAULT_MAX_INLINE_BYTES = 10 * 1024 * 1024
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000  # spec §1.5: larger values are coerced to 1000


def parent_name(project: str, location: str) -> str:
    """``projects/{p}/locations/{l}``."""
    return f"projects/{project}/locations/{location}"


def cache_name(project: str, location: str, cache_id: str) -> str:
    """``projects/{p}/locations/{l}/cachedContents/{id}``."""
    return f"{parent_name(project, location)}/cachedContents/{cache_id}"


class CachedContentService:
    """The cachedContents collection over one :class:`CacheStore`."""

    default_ttl = timedelta(minutes=60)  # spec §1.3

    def __init__(
        self,
        *,
        store: CacheStore,
        catalog: ModelCatalog,
        now: Callable[[], datetime],
        new_id: Callable[[], str],
        max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES,
        default_page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.now = now
        self.new_id = new_id
        self.max_inline_bytes = max_inline_bytes
        self.default_page_size = default_page_size

    # -- create --------------------------------------------------------------------------

    def create(self, *, project: str, location: str, body: Any, body_size: int) -> dict[str, Any]:
        """CreateCachedContent: validate, count tokens, check the model minimum, store.

        Raises 400 for bad input, oversize content, ttl+expireTime, or too few tokens, and
        404 for a model Vertex does not serve.
        """
        if body_size > self.max_inline_bytes:
            # The Google front end's wording for an oversize payload.
            raise invalid_argument(
                f"Request payload size exceeds the limit: {self.max_inline_bytes} bytes."
            )
        fields = normalize_cached_content(body)
        model_value = fields.get("model")
        require(isinstance(model_value, str) and bool(model_value), "model is required.")
        assert isinstance(model_value, str)  # checked by require() above
        model = parse_model_name(model_value)
        if model is None:
            # The SDK always expands the model to this form (spec §1.2); raw callers must too.
            raise invalid_argument(
                f"Invalid model {model_value!r}: expected "
                "projects/{project}/locations/{location}/publishers/google/models/{model}."
            )
        require(
            (model.project, model.location) == (project, location),
            f"The model {model_value} must be in the parent {parent_name(project, location)}.",
        )
        minimum = self.catalog.min_cache_tokens(model.model_id)
        if minimum is None:
            raise publisher_model_not_found(model.full)
        validate_inputs(fields)
        kms_key_name = kms_key_name_from(fields, location)
        now = self.now()
        expire_time = expiry_from(fields, now, default=self.default_ttl)
        contents = list(fields.get("contents") or [])
        system_instruction = fields.get("systemInstruction")
        tools = list(fields.get("tools") or [])
        token_count = estimate_cached_content_tokens(
            system_instruction=system_instruction, contents=contents, tools=tools
        )
        if token_count < minimum:
            raise below_minimum_tokens(token_count=token_count, minimum=minimum)
        with self.store.lock:
            name = self._unused_name(project, location)
            record = StoredCache(
                name=name,
                project=project,
                location=location,
                cache_id=name.rsplit("/", 1)[1],
                model=model.full,
                create_time=now,
                update_time=now,
                expire_time=expire_time,
                total_token_count=token_count,
                text_count=text_character_count(
                    system_instruction=system_instruction, contents=contents
                ),
                display_name=fields.get("displayName") or None,
                contents=contents,
                system_instruction=system_instruction,
                tools=tools,
                tool_config=fields.get("toolConfig"),
                kms_key_name=kms_key_name,
            )
            self.store.add(record)
        return record.to_resource()

    def _unused_name(self, project: str, location: str) -> str:
        while True:
            name = cache_name(project, location, self.new_id())
            if not self.store.contains(name):
                return name

    # -- get / delete ----------------------------------------------------------------------

    def live(self, name: str) -> StoredCache:
        """The live record for a full cache name, or 404 (unknown, deleted or expired)."""
        record = self.store.get_live(name, self.now())
        if record is None:
            raise cached_content_not_found(name)
        return record

    def get(self, *, name: str) -> dict[str, Any]:
        """GetCachedContent: output fields only."""
        return self.live(name).to_resource()

    def delete(self, *, name: str) -> dict[str, Any]:
        """DeleteCachedContent: answers ``{}`` (google.protobuf.Empty) with HTTP 200."""
        with self.store.lock:
            self.live(name)
            self.store.delete(name)
        return {}

    # -- list ------------------------------------------------------------------------------

    def list(
        self,
        *,
        project: str,
        location: str,
        page_size: str | None,
        page_token: str | None,
    ) -> dict[str, Any]:
        """ListCachedContents: live caches of one project/location, oldest first.

        ``nextPageToken`` is present only when another page exists (spec §1.5). The token is
        opaque to callers; it holds the parent and the last item served, so a cache deleted
        between pages does not shift later ones.
        """
        size = self._page_size(page_size)
        parent = parent_name(project, location)
        records = self.store.live_in_parent(project=project, location=location, now=self.now())
        if page_token:
            after = decode_page_token(page_token, parent)
            records = [record for record in records if sort_key(record) > after]
        page, rest = records[:size], records[size:]
        response: dict[str, Any] = {}
        if page:
            response["cachedContents"] = [record.to_resource() for record in page]
        if rest:
            response["nextPageToken"] = encode_page_token(parent, sort_key(page[-1]))
        return response

    def _page_size(self, raw: str | None) -> int:
        if raw in (None, ""):
            return self.default_page_size
        try:
            size = int(raw)
        except ValueError:
            raise invalid_argument(f"Invalid value for pageSize: {raw!r}.") from None
        require(size >= 0, "page_size must not be negative.")
        if size == 0:
            return self.default_page_size
        return min(size, MAX_PAGE_SIZE)

    # -- patch -----------------------------------------------------------------------------

    def patch(self, *, name: str, body: Any, update_mask: str | None) -> dict[str, Any]:
        """UpdateCachedContent: only ``ttl`` or ``expireTime`` may change (spec §1.4).

        A missing ``updateMask`` is inferred from the fields present in the body, as the
        genai SDK never sends one. ``ttl`` sets the expiry to now + ttl.
        """
        fields = normalize_cached_content(body)
        paths = update_mask_paths(update_mask, fields)
        require(
            len(paths) == 1,
            "Only one of ttl and expire_time can be updated at a time.",
        )
        (path,) = paths
        require(
            fields.get(path) is not None,
            f"update_mask names {path} but the request body does not set it.",
        )
        now = self.now()
        expire_time = expiry_from({path: fields[path]}, now, default=None)

        def apply(record: StoredCache) -> None:
            record.expire_time = expire_time
            record.update_time = now

        with self.store.lock:
            self.live(name)
            record = self.store.update(name, apply)
        if record is None:  # pragma: no cover - the lock makes this unreachable
            raise cached_content_not_found(name)
        return record.to_resource()
