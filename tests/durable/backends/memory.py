from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from agentflow.durable import DurableMemory, InMemoryRunEventStore, MemoryDurableStore
from agentflow.durable.testing import DurableHarness


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    memory = DurableMemory()

    async def corrupt(namespace: str | None, key: str) -> None:
        runs = memory.runs(namespace or "")
        runs.rows[key] = replace(runs.rows[key], body=b'{"not": "a record"}')

    yield DurableHarness(
        name="memory",
        stores=lambda namespace: MemoryDurableStore(namespace=namespace, memory=memory),
        event_stores=lambda namespace: InMemoryRunEventStore(namespace=namespace, memory=memory),
        corrupt=corrupt,
    )
