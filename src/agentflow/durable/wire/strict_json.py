"""The strict JSON reader: reads wire documents as the original's reader does."""

from __future__ import annotations

import json
import re
from typing import Any

from agentflow.durable.errors import DurableError

__all__ = ["parse_json"]

_JSON_INVALID = "checkpoint_json_invalid"
#: Serde's reader holds an integer literal as u64/i64 when it fits and as a
#: float when it does not; the strict reader does the same.
_INT_LITERAL_RANGE = (-(1 << 63), (1 << 64) - 1)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DurableError(_JSON_INVALID, f"duplicate JSON object key {key!r}")
            seen.add(key)
    return result


def _int_literal(text: str) -> int | float:
    number = int(text)
    low, high = _INT_LITERAL_RANGE
    return number if low <= number <= high else float(text)


def _no_constant(name: str) -> Any:
    raise DurableError(_JSON_INVALID, f"{name} is not JSON")


def _find_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_find_surrogate(key) or _find_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_find_surrogate(item) for item in value)
    return False


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Read JSON as strictly as the original's reader.

    Refuses (``checkpoint_json_invalid``) invalid UTF-8, duplicate object keys,
    ``NaN``/``Infinity`` and escapes of lone surrogates; an integer literal
    beyond 64 bits becomes a float, as serde_json holds it, so a document
    read here canonicalizes to the same bytes as in Rust.
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        if isinstance(data, str):
            data.encode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_constant=_no_constant,
            parse_int=_int_literal,
        )
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise DurableError(_JSON_INVALID, f"not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(text) and _find_surrogate(value):
        raise DurableError(_JSON_INVALID, "a string escapes a lone surrogate")
    return value
