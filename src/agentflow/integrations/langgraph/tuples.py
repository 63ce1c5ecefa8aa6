"""LangGraph checkpoints and writes to agentflow records, and records to tuples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import INTERRUPT

from agentflow.checkpoint.base import Checkpoint
from agentflow.errors import CheckpointCorrupted
from agentflow.integrations.langgraph.records import (
    Record,
    checkpoint_step,
    record,
    record_ts,
)
from agentflow.integrations.langgraph.values import ValueCodec

__all__ = ["TupleCodec", "config_of", "merge_writes"]


def config_of(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def merge_writes(stored: list[Any], new: list[list[Any]]) -> list[Any] | None:
    """``stored`` with ``new`` merged as LangGraph's savers do, None if unchanged.

    A regular write, keyed by (task, index), is written once: a resend keeps the
    first. A special write (error, interrupt, resume, scheduled: negative index)
    replaces the one stored under its key.
    """
    merged = {(entry[0], entry[1]): entry for entry in stored}
    changed = False
    for entry in new:
        key = (entry[0], entry[1])
        if key in merged and (entry[1] >= 0 or merged[key] == entry):
            continue
        merged[key] = entry
        changed = True
    return list(merged.values()) if changed else None


class TupleCodec:
    """Builds the records of :mod:`~agentflow.integrations.langgraph.records`."""

    __slots__ = ("values",)

    def __init__(self, values: ValueCodec) -> None:
        self.values = values

    def checkpoint_record(
        self,
        thread: str,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        parent_id: str | None,
    ) -> Checkpoint:
        split = self.values.split
        state, packed = split(checkpoint.get("channel_values") or {})
        rest, rest_packed = split({k: v for k, v in checkpoint.items() if k != "channel_values"})
        meta, meta_packed = split(metadata)
        parent = None if parent_id is None else f"{thread}:{checkpoint_step(parent_id)}"
        fields = {
            "id": checkpoint["id"],
            **({} if parent_id is None else {"parent_id": parent_id}),
            "thread_id": thread_id,
            "ns": checkpoint_ns,
            "checkpoint": rest,
            "checkpoint_packed": rest_packed,
            "values_packed": packed,
            "metadata": meta,
            "metadata_packed": meta_packed,
        }
        return record(
            thread,
            checkpoint_step(checkpoint["id"]),
            "checkpoint",
            fields,
            state=state,
            ts=record_ts(checkpoint.get("ts")),
            parent=parent,
        )

    def write_entries(
        self, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> list[list[Any]]:
        return [
            [
                task_id,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                task_path,
                *self.values.entry(value),
            ]
            for idx, (channel, value) in enumerate(writes)
        ]

    def writes_record(
        self,
        thread: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        entries: list[Any],
    ) -> Checkpoint:
        fields = {
            "id": checkpoint_id,
            "thread_id": thread_id,
            "ns": checkpoint_ns,
            "writes": entries,
        }
        interrupted = any(entry[2] == INTERRUPT for entry in entries)
        step = checkpoint_step(checkpoint_id) + 1
        return record(thread, step, "writes", fields, interrupted=interrupted)

    # -- reading -------------------------------------------------------------

    def metadata(self, rec: Record) -> dict[str, Any]:
        return self.values.join(rec.fields.get("metadata"), rec.fields.get("metadata_packed"))

    def checkpoint(self, rec: Record) -> dict[str, Any]:
        checkpoint = self.values.join(
            rec.fields.get("checkpoint"), rec.fields.get("checkpoint_packed")
        )
        checkpoint["channel_values"] = self.values.join(
            dict(rec.source.state), rec.fields.get("values_packed")
        )
        if checkpoint.get("id") != rec.checkpoint_id:
            raise CheckpointCorrupted(f"{rec.source.thread!r} step {rec.step}: ids disagree")
        return checkpoint

    def pending_writes(
        self, rec: Record | None, channels: set[str] | None = None
    ) -> list[PendingWrite]:
        """The writes of a writes record in ``writes_sort_key`` order (only ``channels``)."""
        if rec is None:
            return []
        entries = []
        for entry in rec.fields["writes"]:
            if (
                type(entry) is not list
                or len(entry) < 5
                or type(entry[0]) is not str
                or type(entry[1]) is not int
                or type(entry[2]) is not str
                or type(entry[3]) is not str
            ):
                raise CheckpointCorrupted(
                    f"{rec.source.thread!r} step {rec.step}: a write is damaged"
                )
            if channels is None or entry[2] in channels:
                entries.append(entry)
        entries.sort(key=lambda e: writes_sort_key(e[3], e[0], e[1]))
        return [(e[0], e[2], self.values.from_entry(e[4:])) for e in entries]

    def to_tuple(self, rec: Record, writes: Record | None) -> CheckpointTuple:
        fields = rec.fields
        thread_id, checkpoint_ns = fields.get("thread_id"), fields.get("ns")
        parent_id = fields.get("parent_id")
        if type(thread_id) is not str or type(checkpoint_ns) is not str:
            raise CheckpointCorrupted(f"{rec.source.thread!r} step {rec.step}: damaged keys")
        if parent_id is not None and type(parent_id) is not str:
            raise CheckpointCorrupted(f"{rec.source.thread!r} step {rec.step}: damaged parent")
        return CheckpointTuple(
            config=config_of(thread_id, checkpoint_ns, rec.checkpoint_id),
            checkpoint=self.checkpoint(rec),  # type: ignore[arg-type]
            metadata=self.metadata(rec),  # type: ignore[arg-type]
            parent_config=None
            if parent_id is None
            else config_of(thread_id, checkpoint_ns, parent_id),
            pending_writes=self.pending_writes(writes),
        )
