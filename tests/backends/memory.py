from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.testing import BackendHarness


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    store = MemoryStore()

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        stored = store._namespace(namespace or "").threads[thread][step]
        stored.encoded = type(stored.encoded)(**{**_as_dict(stored.encoded), "payload": b"\xff{"})

    yield BackendHarness(
        name="memory",
        factory=MemoryCheckpointer,
        kwargs={"store": store},
        multiprocess=False,
        corrupt=corrupt,
    )


def _as_dict(obj: object) -> dict[str, object]:
    return {name: getattr(obj, name) for name in obj.__slots__}  # type: ignore[attr-defined]
