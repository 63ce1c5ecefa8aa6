"""Masking of sensitive values before a checkpoint is persisted.

WARNING: a redacted checkpoint cannot be resumed to its exact original state;
masked values are lost. Use redaction for archival, audit or debug copies, not
for the checkpointer a run resumes from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agentflow.checkpoint.base import Checkpoint, Redactor
from agentflow.errors import CheckpointNotSerializable, InvalidArgument

__all__ = [
    "DEFAULT_MASK",
    "MAX_DEPTH",
    "RUNTIME_KEY",
    "RedactKeys",
    "redact_checkpoint",
    "redact_none",
]

DEFAULT_MASK = "***REDACTED***"
#: Deepest nesting a checkpoint may hold (the JSON encoder's own limit).
MAX_DEPTH: Final = 255
#: The key of ``extra`` that holds agentflow.runtime's own bookkeeping.
RUNTIME_KEY: Final = "runtime"
#: The parts of that bookkeeping that hold user data, each a mapping of node name
#: to what the node returned or was answered; everything else in it is structure.
_RUNTIME_USER_DATA: Final = ("writes", "answers")


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
        return self._walk(value, 0)

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
            raise CheckpointNotSerializable(f"value nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            return {
                k: (
                    self.mask
                    if isinstance(k, str) and k.casefold() in self._keys
                    else self._walk(v, depth + 1)
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(v, depth + 1) for v in value]
        return value

    def __repr__(self) -> str:
        return f"RedactKeys({sorted(self._keys)!r}, mask={self.mask!r})"


def _redact_runtime(section: Any, redact: Redactor) -> Any:
    """Redact the user data in the runtime's bookkeeping, keep its structure.

    A redactor that matched ``graph`` or ``writes`` would otherwise make a
    thread unresumable (its graph unknown, its pending writes not a mapping).
    """
    if not isinstance(section, dict):
        return section
    kept = dict(section)
    for part in _RUNTIME_USER_DATA:
        per_node = kept.get(part)
        if isinstance(per_node, dict):
            kept[part] = {node: redact(value) for node, value in per_node.items()}
    return kept


def redact_checkpoint(cp: Checkpoint, redact: Redactor) -> Checkpoint:
    """``cp`` with ``state``, ``interrupt_payload`` and ``extra`` passed through ``redact``.

    ``extra[RUNTIME_KEY]`` is agentflow.runtime's bookkeeping: only the user
    data inside it is redacted, so resuming still finds its graph, pending
    writes and answers (masked where the redactor masked them).
    """
    if redact is redact_none:
        return cp
    state = redact(cp.state)
    if not isinstance(state, Mapping):
        raise InvalidArgument(
            f"the redactor turned the state of thread {cp.thread!r} into a non-mapping"
        )
    user_extra = {k: v for k, v in cp.extra.items() if k != RUNTIME_KEY}
    extra = redact(user_extra) if user_extra else {}
    if not isinstance(extra, dict):
        raise InvalidArgument(f"the redactor turned extra of thread {cp.thread!r} into a non-dict")
    if RUNTIME_KEY in cp.extra:
        extra = {**extra, RUNTIME_KEY: _redact_runtime(cp.extra[RUNTIME_KEY], redact)}
    return dataclasses.replace(
        cp, state=state, interrupt_payload=redact(cp.interrupt_payload), extra=extra
    )
