"""What both framework adapters store: one tagged record per agentflow checkpoint.

An adapter keeps its own fields under ``extra[KEY]`` as ``{"v": FORMAT,
"kind": KIND, ...}``; agentflow's own fields (state, ts, interrupted) are
what ``agentflow threads`` and ``history`` show. The header is checked here
once, so a record that claims to be an adapter's but is not whole raises
:class:`~agentflow.errors.CheckpointCorrupted` the same way in both.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentflow.checkpoint.base import Checkpoint
from agentflow.errors import CheckpointCorrupted

__all__ = ["TaggedRecord", "tagged", "tagged_fields"]

K = TypeVar("K", bound=str)


@dataclass(frozen=True, slots=True)
class TaggedRecord(Generic[K]):
    """One stored record, checked: what kind it is and the adapter's fields."""

    kind: K
    step: int
    revision: int
    fields: dict[str, Any]
    source: Checkpoint = field(repr=False)

    @property
    def checkpoint_id(self) -> str:
        value: str = self.fields["id"]
        return value


def tagged_fields(
    cp: Checkpoint, key: str, version: int, kinds: Collection[str], framework: str
) -> tuple[dict[str, Any], str] | None:
    """The adapter fields of ``cp`` and the message naming it damaged; None when it is
    not the adapter's. A wrong header (not a mapping, another format, an unknown
    kind) raises :class:`~agentflow.errors.CheckpointCorrupted`."""
    fields = cp.extra.get(key)
    if fields is None:
        return None
    damaged = f"thread {cp.thread!r} step {cp.step}: the {framework} record is damaged"
    if type(fields) is not dict or fields.get("v") != version or fields.get("kind") not in kinds:
        raise CheckpointCorrupted(damaged)
    return fields, damaged


def tagged(key: str, version: int, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The ``extra`` of a checkpoint holding one adapter record."""
    return {key: {"v": version, "kind": kind, **fields}}
