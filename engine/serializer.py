"""JSON only: dumps/loads with validation and a size limit. Never pickle."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import PayloadTooLarge, SerializationError

JSONDecodeError = orjson.JSONDecodeError


def dumps(value: Any) -> bytes:
    """Encode `value` as JSON bytes, or raise SerializationError naming the offending type."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise SerializationError(f"value is not JSON serializable: {exc}") from None


def dumps_limited(value: Any, limit_bytes: int) -> bytes:
    """Encode `value` as JSON and raise PayloadTooLarge past `limit_bytes`."""
    data = dumps(value)
    if len(data) > limit_bytes:
        raise PayloadTooLarge(len(data), limit_bytes)
    return data


def loads(data: str | bytes) -> Any:
    """Decode JSON text; raise SerializationError on anything else."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SerializationError(f"invalid JSON: {exc}") from None
