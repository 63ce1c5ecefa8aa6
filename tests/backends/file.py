"""The file backend in the shared suites: one fresh store directory per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.testing import BackendHarness


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    root = tmp_path / "file-store"

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        path = root.joinpath(*_namespace_parts(namespace), thread, f"{step:06d}.json")
        path.write_bytes(b'{"format":1,"revision":1,"payload":\xff{')

    yield BackendHarness(
        name="file",
        factory=FileCheckpointer,
        kwargs={"root": str(root)},
        restricted_thread_ids=True,
        corrupt=corrupt,
    )


def _namespace_parts(namespace: str | None) -> list[str]:
    return [".ns", namespace.encode().hex()] if namespace else []
