from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import BackendHarness


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    path = str(tmp_path / "checkpoints.db")

    def overwrite(change: str, namespace: str | None, thread: str, step: int) -> None:
        with sqlite3.connect(path) as conn:
            changed = conn.execute(
                f"UPDATE agentflow_checkpoints SET {change} "
                "WHERE namespace = ? AND thread = ? AND step = ?",
                (namespace or "", thread, step),
            ).rowcount
        conn.close()
        assert changed == 1, f"no stored row for {(namespace, thread, step)}"

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        await asyncio.to_thread(overwrite, "payload = x'ff7b'", namespace, thread, step)

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        await asyncio.to_thread(overwrite, "revision = 'abc'", namespace, thread, step)

    yield BackendHarness(
        name="sqlite",
        factory=SqliteCheckpointer,
        kwargs={"path": path},
        corrupt=corrupt,
        damage_revision=damage_revision,
    )
