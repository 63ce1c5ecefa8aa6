"""Deleting, copying and pruning LangGraph threads through the protocol.

Costs: ``delete_thread``, ``copy_thread`` and ``prune`` touch the threads they
name (one read of the namespace list, then per namespace a delete, a history
read and puts, or a latest read and a prune). ``delete_for_runs`` has no index
to go by (LangGraph's own savers scan too): it pages every thread of the
checkpointer's namespace and reads each LangGraph thread's history once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.errors import CheckpointConflict, InvalidArgument
from agentflow.integrations.langgraph.records import (
    KEY,
    Record,
    checkpoint_step,
    namespace_thread,
    record,
)
from agentflow.integrations.langgraph.store import RecordStore

__all__ = ["copy_thread", "delete_for_runs", "delete_thread", "prune"]


async def delete_thread(store: RecordStore, thread_id: str) -> None:
    namespaces = await store.namespaces(thread_id)
    await store.forget(thread_id, [namespace_thread(thread_id, ns) for ns in namespaces])


async def copy_thread(store: RecordStore, source: str, target: str) -> None:
    """Copy every record of every namespace of ``source`` (ids and steps kept)."""
    for ns in await store.namespaces(source):
        thread = namespace_thread(target, ns)
        await store.register(target, ns)
        async for rec in store.records(namespace_thread(source, ns)):
            fields = {**rec.source.extra[KEY], "thread_id": target}
            parent = rec.source.parent
            if parent is not None and rec.kind == "checkpoint":
                parent = f"{thread}:{checkpoint_step(rec.fields['parent_id'])}"
            extra = {**rec.source.extra, KEY: fields}
            await store.checkpointer.put(
                dataclasses.replace(
                    rec.source, thread=thread, parent=parent, extra=extra, revision=0
                )
            )
        store.forget_writes(thread)


async def prune(store: RecordStore, thread_ids: Sequence[str], strategy: str) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise InvalidArgument(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    for thread_id in thread_ids:
        if strategy == "delete":
            await delete_thread(store, thread_id)
            continue
        for ns in await store.namespaces(thread_id):
            thread = namespace_thread(thread_id, ns)
            latest = await store.latest(thread)
            if latest is not None:
                keep_from = await _oldest_needed(store, thread, latest[0])
                await store.checkpointer.prune(thread, before_step=keep_from)


async def _oldest_needed(store: RecordStore, thread: str, latest: Record) -> int:
    """The lowest step ``latest`` needs: a DeltaChannel rebuilds from writes on
    the parent chain back to its last snapshot, so those ancestors stay."""
    counters = store.codec.metadata(latest).get("counters_since_delta_snapshot") or {}
    pending = set(counters)
    rec = latest
    while pending:
        pending -= _stored_channels(rec)
        parent_id = rec.fields.get("parent_id")
        if not pending or parent_id is None:
            break
        pair = await store.by_id(thread, parent_id)
        if pair is None:
            break
        rec = pair[0]
    return rec.step


def _stored_channels(rec: Record) -> set[str]:
    return set(rec.source.state) | set(rec.fields.get("values_packed") or {})


async def delete_for_runs(store: RecordStore, run_ids: Iterable[str]) -> None:
    runs = {str(run) for run in run_ids}
    if not runs:
        return
    async for thread in store.threads():
        await _delete_runs_in(store, thread, runs)


async def _delete_runs_in(store: RecordStore, thread: str, runs: set[str]) -> None:
    records = [rec async for rec in store.records(thread)]
    doomed_ids = {
        rec.checkpoint_id
        for rec in records
        if rec.kind == "checkpoint" and store.codec.metadata(rec).get("run_id") in runs
    }
    if not doomed_ids:
        return
    store.forget_writes(thread)
    kept = [
        rec
        for rec in records
        if rec.kind in ("checkpoint", "writes") and rec.checkpoint_id not in doomed_ids
    ]
    if not any(rec.kind == "checkpoint" for rec in kept):
        await store.checkpointer.delete_thread(thread)
        return
    first = kept[0].step
    await store.checkpointer.prune(thread, before_step=first)
    live: int | None = None
    for rec in records:
        if rec.step < first:
            continue
        gone = rec.kind == "deleted" or rec.checkpoint_id in doomed_ids
        if not gone:
            live = rec.step if rec.kind == "checkpoint" else live
            continue
        if rec.kind == "deleted" and rec.fields["live"] == live:
            continue
        await _tombstone(store, rec, live)


async def _tombstone(store: RecordStore, rec: Record, live: int | None) -> None:
    fields: dict[str, Any] = {"id": rec.fields["id"], "live": live}
    cp: Checkpoint = record(rec.source.thread, rec.step, "deleted", fields, ts=rec.source.ts)
    try:
        await store.checkpointer.put(cp, if_revision=rec.revision)
    except CheckpointConflict:
        # Rewritten since it was read (a re-put of the same id): it stays.
        return
