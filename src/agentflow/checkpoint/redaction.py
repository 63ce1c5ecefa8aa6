"""Masking of sensitive values before a checkpoint is persisted.

WARNING: a redacted checkpoint cannot be resumed to its exact original state;
masked values are lost. Use redaction for archival, audit or debug copies, not
for the checkpointer a run resumes from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["DEFAULT_MASK", "RedactKeys", "redact_none"]

DEFAULT_MASK = "***REDACTED***"


def redact_none(value: Any) -> Any:
    """The default redactor: persist everything as it is."""
    return value


class RedactKeys:
    """Mask the value under any mapping key in ``keys``, at any depth.

    Keys match case-insensitively (``"API_KEY"`` matches ``"api_key"``). Lists
    and tuples are walked too. The input is never mutated; a new structure is
    returned.
    """

    __slots__ = ("_keys", "mask")

    def __init__(self, keys: Iterable[str], mask: Any = DEFAULT_MASK) -> None:
        if isinstance(keys, str):
            raise TypeError("keys must be an iterable of strings, not a single string")
        self._keys = frozenset(k.casefold() for k in keys)
        self.mask = mask

    @property
    def keys(self) -> frozenset[str]:
        """The case-folded keys whose values are masked."""
        return self._keys

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: self.mask if isinstance(k, str) and k.casefold() in self._keys else self(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value

    def __repr__(self) -> str:
        return f"RedactKeys({sorted(self._keys)!r}, mask={self.mask!r})"
