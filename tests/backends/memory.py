from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.rows import RunRow
from agentflow.checkpoint.testing import BackendHarness
from agentflow.durable.enums import OperationKind


def _entry(part: str) -> tuple[OperationKind, int] | None:
    """The journal and place a part name names, None for the body."""
    if part == "body":
        return None
    kind, _, index = part.partition(".")
    return OperationKind(kind), int(index)


def read_row_part(row: RunRow, part: str) -> bytes:
    """One part of a row of stored parts (the memory store keeps exactly those)."""
    entry = _entry(part)
    return row.body if entry is None else row.journal(entry[0])[entry[1]]


def with_row_part(row: RunRow, part: str, data: bytes) -> RunRow:
    """``row`` with one part replaced."""
    entry = _entry(part)
    if entry is None:
        return dataclasses.replace(row, body=data)
    kind, index = entry
    entries = list(row.journal(kind))
    entries[index] = data
    if kind is OperationKind.MODEL:
        return dataclasses.replace(row, model_journal=tuple(entries))
    return dataclasses.replace(row, tool_journal=tuple(entries))


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    store = MemoryStore()

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        stored = store.namespace(namespace or "").threads[thread][step]
        stored.encoded = dataclasses.replace(stored.encoded, payload=b"\xff{")

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        store.namespace(namespace or "").threads[thread][step].revision = -7

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        return store.namespace(namespace or "").threads[thread][step].encoded.payload

    async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
        stored = store.namespace(namespace or "").threads[thread][step]
        stored.encoded = dataclasses.replace(stored.encoded, payload=data)

    async def corrupt_run(namespace: str | None, key: str) -> None:
        runs = store.namespace(namespace or "").runs
        runs.rows[key] = dataclasses.replace(runs.rows[key], body=b'{"not": "a record"}')

    async def contents() -> bool:
        return store.created

    async def read_part(namespace: str | None, key: str, part: str) -> bytes:
        data = store.namespace(namespace or "")
        if part == "event":
            return data.events.by_id[key].stored
        return read_row_part(data.runs.rows[key], part)

    async def write_part(namespace: str | None, key: str, part: str, payload: bytes) -> None:
        data = store.namespace(namespace or "")
        if part == "event":
            events = data.events.by_id
            events[key] = dataclasses.replace(events[key], stored=payload)
            return
        data.runs.rows[key] = with_row_part(data.runs.rows[key], part, payload)

    yield BackendHarness(
        name="memory",
        factory=MemoryCheckpointer,
        kwargs={"store": store},
        multiprocess=False,
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
        corrupt_run=corrupt_run,
        contents=contents,
        read_part=read_part,
        write_part=write_part,
    )
