"""The file backend in the shared suites: one fresh store directory per test."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.testing import BackendHarness


def step_path(root: Path, namespace: str | None, thread: str, step: int) -> Path:
    """Where the store keeps (namespace, thread, step) under ``root``."""
    parts = [".ns", namespace.encode().hex()] if namespace else []
    return root.joinpath(*parts, thread, f"{step:06d}.json")


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    root = tmp_path / "file-store"

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        # In place, as a disk fault would: the thread's head, a link to it, sees it too.
        step_path(root, namespace, thread, step).write_bytes(b'{"format":2,"payload":\xff{')

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        path = step_path(root, namespace, thread, step)
        data = path.read_bytes()
        path.write_bytes(re.sub(rb'"revision":\d+', b'"revision":-7', data, count=1))

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        # The whole step file: its JSON header frames the record the base checks.
        return step_path(root, namespace, thread, step).read_bytes()

    async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
        step_path(root, namespace, thread, step).write_bytes(data)

    yield BackendHarness(
        name="file",
        factory=FileCheckpointer,
        kwargs={"root": str(root)},
        restricted_thread_ids=True,
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
    )
