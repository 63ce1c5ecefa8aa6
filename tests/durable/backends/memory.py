from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from agentflow.durable import InMemoryRunEventStore, MemoryDurableStore
from agentflow.durable.memory import from_url, named_memory
from agentflow.durable.testing import DurableHarness
from agentflow.errors import StoreNotFound


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    name = f"harness-{uuid.uuid4().hex}"

    async def corrupt(namespace: str | None, key: str) -> None:
        runs = named_memory(name).runs(namespace or "")
        runs.rows[key] = replace(runs.rows[key], body=b'{"not": "a record"}')

    async def contents() -> bool:
        try:
            named_memory(name, create=False)
        except StoreNotFound:
            return False
        return True

    yield DurableHarness(
        name="memory",
        stores=lambda namespace: MemoryDurableStore(namespace=namespace, memory=named_memory(name)),
        event_stores=lambda namespace: InMemoryRunEventStore(
            namespace=namespace, memory=named_memory(name)
        ),
        corrupt=corrupt,
        readers=lambda namespace: from_url(f"memory://{name}", namespace=namespace, create=False),
        contents=contents,
    )
