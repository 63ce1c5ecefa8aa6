from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import InMemoryRunEventStore, MemoryDurableStore
from agentflow.durable.enums import OperationKind
from agentflow.durable.memory import DurableMemory, from_url, named_memory
from agentflow.durable.rows import RunRow
from agentflow.durable.testing import DurableHarness
from agentflow.errors import StoreNotFound


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
        return replace(row, body=data)
    kind, index = entry
    entries = list(row.journal(kind))
    entries[index] = data
    if kind is OperationKind.MODEL:
        return replace(row, model_journal=tuple(entries))
    return replace(row, tool_journal=tuple(entries))


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    name = f"harness-{uuid.uuid4().hex}"

    def memory() -> DurableMemory:
        return named_memory(name)

    async def corrupt(namespace: str | None, key: str) -> None:
        runs = memory().runs(namespace or "")
        runs.rows[key] = replace(runs.rows[key], body=b'{"not": "a record"}')

    async def contents() -> bool:
        try:
            named_memory(name, create=False)
        except StoreNotFound:
            return False
        return True

    async def read_part(namespace: str | None, key: str, part: str) -> bytes:
        if part == "event":
            return memory().events(namespace or "").by_id[key].stored
        return read_row_part(memory().runs(namespace or "").rows[key], part)

    async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
        if part == "event":
            events = memory().events(namespace or "").by_id
            events[key] = replace(events[key], stored=data)
            return
        runs = memory().runs(namespace or "")
        runs.rows[key] = with_row_part(runs.rows[key], part, data)

    def stores(namespace: str | None, sealing: KeyRing | None = None) -> MemoryDurableStore:
        return MemoryDurableStore(namespace=namespace, memory=memory(), sealing=sealing)

    def event_stores(
        namespace: str | None, sealing: KeyRing | None = None
    ) -> InMemoryRunEventStore:
        return InMemoryRunEventStore(namespace=namespace, memory=memory(), sealing=sealing)

    yield DurableHarness(
        name="memory",
        stores=stores,
        event_stores=event_stores,
        corrupt=corrupt,
        readers=lambda namespace: from_url(f"memory://{name}", namespace=namespace, create=False),
        contents=contents,
        sealed_stores=stores,
        sealed_event_stores=event_stores,
        read_part=read_part,
        write_part=write_part,
    )
