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

    where = "WHERE namespace = ? AND thread = ? AND step = ?"

    def overwrite(
        change: str, namespace: str | None, thread: str, step: int, *values: object
    ) -> None:
        with sqlite3.connect(path) as conn:
            changed = conn.execute(
                f"UPDATE agentflow_checkpoints SET {change} {where}",
                (*values, namespace or "", thread, step),
            ).rowcount
        conn.close()
        assert changed == 1, f"no stored row for {(namespace, thread, step)}"

    def stored_payload(namespace: str | None, thread: str, step: int) -> bytes:
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                f"SELECT payload FROM agentflow_checkpoints {where}",
                (namespace or "", thread, step),
            ).fetchall()
        conn.close()
        assert len(rows) == 1, f"no stored row for {(namespace, thread, step)}"
        payload: bytes = rows[0][0]
        return payload

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        await asyncio.to_thread(overwrite, "payload = x'ff7b'", namespace, thread, step)

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        await asyncio.to_thread(overwrite, "revision = 'abc'", namespace, thread, step)

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        return await asyncio.to_thread(stored_payload, namespace, thread, step)

    async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
        await asyncio.to_thread(overwrite, "payload = ?", namespace, thread, step, data)

    yield BackendHarness(
        name="sqlite",
        factory=SqliteCheckpointer,
        kwargs={"path": path},
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
    )
