"""Reducers: how the updates of several nodes to one state key combine.

A reducer is ``(current, update) -> new``; ``current`` is ``None`` when the key
is not in the state yet. Updates of one step are folded in frontier order, so
the result is deterministic whatever order the nodes finished in. Keys without
a reducer take the last write, and two writers in one step are an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Reducer", "add", "append", "merge"]

Reducer = Callable[[Any, Any], Any]


def append(current: Any, update: Any) -> list[Any]:
    """Concatenate lists; a non-list update is appended as one item."""
    base = list(current) if current is not None else []
    if isinstance(update, list | tuple):
        return base + list(update)
    return [*base, update]


def add(current: Any, update: Any) -> Any:
    """Sum numbers, starting from 0."""
    return (current or 0) + update


def merge(current: Any, update: Any) -> dict[str, Any]:
    """Shallow-merge mappings; keys of ``update`` win."""
    if not isinstance(update, Mapping):
        raise TypeError(f"merge expects a mapping update, got {type(update).__name__}")
    return {**(current or {}), **update}
