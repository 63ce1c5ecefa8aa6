from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.testing import BackendHarness


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

    yield BackendHarness(
        name="memory",
        factory=MemoryCheckpointer,
        kwargs={"store": store},
        multiprocess=False,
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
    )
