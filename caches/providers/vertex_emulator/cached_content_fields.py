"""The request side of a CachedContent body: field spellings, validation, expiry, masks.

Vertex parses bodies with protobuf's JSON parser, which accepts a field's JSON name and its
proto name alike (``displayName`` / ``display_name``, ``encryptionSpec`` / ``encryption_spec``,
spec §1.2), rejects unknown fields, and refuses both members of a oneof (``ttl`` and
``expireTime``, spec §1.3). These functions do the same on decoded JSON and raise
:class:`RpcError` 400 with Google-style wording where Vertex's own is not documented.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .rpc_errors import invalid_argument
from .wire_time import parse_duration, parse_timestamp

_FIELD_ALIASES: dict[str, str] = {
    "name": "name",
    "displayName": "displayName",
    "display_name": "displayName",
    "model": "model",
    "systemInstruction": "systemInstruction",
    "system_instruction": "systemInstruction",
    "contents": "contents",
    "tools": "tools",
    "toolConfig": "toolConfig",
    "tool_config": "toolConfig",
    "expireTime": "expireTime",
    "expire_time": "expireTime",
    "ttl": "ttl",
    "createTime": "createTime",
    "create_time": "createTime",
    "updateTime": "updateTime",
    "update_time": "updateTime",
    "usageMetadata": "usageMetadata",
    "usage_metadata": "usageMetadata",
    "encryptionSpec": "encryptionSpec",
    "encryption_spec": "encryptionSpec",
}
_EXPIRATION_FIELDS = {"ttl", "expireTime"}
_UPDATE_MASK_PATHS = {"ttl": "ttl", "expireTime": "expireTime", "expire_time": "expireTime"}
_KMS_KEY_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")


def normalize_cached_content(body: Any) -> dict[str, Any]:
    """Map a CachedContent JSON body onto camelCase keys, as protobuf's parser would read it.

    Raises 400 for a non-object body, an unknown field, a field given under both spellings,
    and ``ttl`` together with ``expireTime`` (a oneof, spec §1.3).
    """
    if not isinstance(body, Mapping):
        raise invalid_argument("Invalid JSON payload received. Expected an object.")
    normalized: dict[str, Any] = {}
    expiration_set_by: str | None = None
    for key, value in body.items():
        canonical = _FIELD_ALIASES.get(key)
        if canonical is None:
            # The Google front end's wording for an unknown JSON field.
            raise invalid_argument(
                f"Invalid JSON payload received. Unknown name \"{key}\" at 'cached_content': "
                "Cannot find field."
            )
        if canonical in normalized:
            raise invalid_argument(
                f'Invalid JSON payload received. Duplicate field "{canonical}" (also sent as '
                f'"{key}").'
            )
        if canonical in _EXPIRATION_FIELDS and value is not None:
            if expiration_set_by is not None:
                # Modelled on protobuf's JSON parser; Vertex's exact text is unconfirmed.
                raise invalid_argument(
                    "Invalid JSON payload received. Oneof field 'expiration' is already set "
                    f"by '{expiration_set_by}'. Cannot set '{key}'."
                )
            expiration_set_by = key
        normalized[canonical] = value
    return normalized


def require(condition: bool, message: str) -> None:
    """Raise 400 INVALID_ARGUMENT with ``message`` unless ``condition`` holds."""
    if not condition:
        raise invalid_argument(message)


def _validate_content(value: Any, where: str) -> None:
    require(isinstance(value, Mapping), f"Invalid value at '{where}': expected a Content object.")
    parts = value.get("parts")
    require(
        isinstance(parts, list) and all(isinstance(part, Mapping) for part in parts),
        f"Invalid value at '{where}.parts': expected a list of Part objects.",
    )


def validate_inputs(fields: Mapping[str, Any]) -> None:
    """Check the shapes of contents, systemInstruction (text only), tools, toolConfig and
    displayName; the content itself is opaque to the emulator. Raises 400."""
    contents = fields.get("contents")
    if contents is not None:
        require(
            isinstance(contents, list),
            "Invalid value at 'cached_content.contents': expected a list.",
        )
        for index, content in enumerate(contents):
            _validate_content(content, f"cached_content.contents[{index}]")
    system_instruction = fields.get("systemInstruction")
    if system_instruction is not None:
        _validate_content(system_instruction, "cached_content.system_instruction")
        # Spec §1.2: the system instruction of a cache is text only.
        require(
            all("text" in part for part in system_instruction["parts"]),
            "system_instruction of a CachedContent supports text parts only.",
        )
    tools = fields.get("tools")
    if tools is not None:
        require(
            isinstance(tools, list) and all(isinstance(tool, Mapping) for tool in tools),
            "Invalid value at 'cached_content.tools': expected a list of Tool objects.",
        )
    tool_config = fields.get("toolConfig")
    if tool_config is not None:
        require(
            isinstance(tool_config, Mapping),
            "Invalid value at 'cached_content.tool_config': expected an object.",
        )
    display_name = fields.get("displayName")
    if display_name is not None:
        require(
            isinstance(display_name, str),
            "Invalid value at 'cached_content.display_name': expected a string.",
        )


def kms_key_name_from(fields: Mapping[str, Any], location: str) -> str | None:
    """The CMEK key of ``encryptionSpec`` (either spelling of the field), checked; 400 for a
    malformed key or for the global location."""
    spec = fields.get("encryptionSpec")
    if spec is None:
        return None
    require(isinstance(spec, Mapping), "Invalid value at 'cached_content.encryption_spec'.")
    key = spec.get("kmsKeyName", spec.get("kms_key_name"))
    require(
        isinstance(key, str) and _KMS_KEY_RE.match(key) is not None,
        "encryption_spec.kms_key_name must look like "
        "projects/{p}/locations/{l}/keyRings/{r}/cryptoKeys/{k}.",
    )
    assert isinstance(key, str)  # checked by require() above
    # Spec §1.9: CMEK is supported for context caches, but not through the global endpoint.
    require(
        location != "global",
        "CMEK (encryption_spec) is not supported for context caches on the global endpoint; "
        "use a regional location.",
    )
    return key


def expiry_from(fields: Mapping[str, Any], now: datetime, *, default: timedelta | None) -> datetime:
    """Expiry from ``ttl`` (now + ttl) or ``expireTime``; ``default`` when neither is set."""
    ttl_value = fields.get("ttl")
    expire_value = fields.get("expireTime")
    try:
        if ttl_value is not None:
            ttl = parse_duration(ttl_value, field="cached_content.ttl")
            require(ttl > timedelta(0), f"ttl must be positive, got {ttl_value!r}.")
            return now + ttl
        if expire_value is not None:
            moment = parse_timestamp(expire_value, field="cached_content.expire_time")
            require(moment > now, "expire_time must be in the future.")
            return moment
    except OverflowError:
        raise invalid_argument("The requested expiration is out of range.") from None
    if default is None:
        raise invalid_argument("Either ttl or expire_time must be set.")
    return now + default


def update_mask_paths(update_mask: str | None, fields: Mapping[str, Any]) -> set[str]:
    """The canonical paths to update: from ``updateMask``, or inferred from the body when the
    mask is missing (the genai SDK never sends one, spec §1.4). 400 for any path but ttl and
    expire_time."""
    if update_mask:
        requested = [path.strip() for path in update_mask.split(",") if path.strip()]
    else:
        requested = [key for key, value in fields.items() if key != "name" and value is not None]
    require(bool(requested), "update_mask is empty and the body sets nothing to update.")
    paths: set[str] = set()
    for path in requested:
        canonical = _UPDATE_MASK_PATHS.get(path)
        if canonical is None:
            raise invalid_argument(
                f"Field '{path}' cannot be updated; only ttl or expire_time can be updated."
            )
        paths.add(canonical)
    return paths
