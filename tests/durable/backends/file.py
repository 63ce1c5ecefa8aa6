"""The file durable backend in the shared suites: one fresh store directory per test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.durable.stores.file import FileDurableStore
from agentflow.durable.stores.file_events import FileRunEventStore
from agentflow.durable.stores.file_names import key_path
from agentflow.durable.testing import DurableHarness


def run_dir(root: Path, namespace: str | None, key: str) -> Path:
    """Where the store keeps the run ``key`` of ``namespace`` under ``root``."""
    base = root / ".ns" / namespace.encode().hex() if namespace else root
    return base.joinpath(".durable", "runs", *key_path(key))


def contents(root: Path) -> list[str]:
    """Every path under ``root`` (none when it does not exist)."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    root = tmp_path / "file-store"

    async def corrupt(namespace: str | None, key: str) -> None:
        # In place, as a disk fault would: the body file the head names.
        bodies = list(run_dir(root, namespace, key).glob("body.*"))
        assert len(bodies) == 1, f"no stored body for {(namespace, key)}"
        bodies[0].write_bytes(b'{"not": 1}')

    yield DurableHarness(
        name="file",
        stores=lambda namespace: FileDurableStore(root, namespace=namespace),
        event_stores=lambda namespace: FileRunEventStore(root, namespace=namespace),
        corrupt=corrupt,
        readers=lambda namespace: FileDurableStore(root, namespace=namespace, create=False),
        contents=lambda: asyncio.to_thread(contents, root),
    )
