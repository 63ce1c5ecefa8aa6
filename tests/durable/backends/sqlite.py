from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

from agentflow.durable.stores.sqlite import SqliteDurableStore
from agentflow.durable.stores.sqlite_events import SqliteRunEventStore
from agentflow.durable.testing import DurableHarness


def overwrite(path: Path, change: str, namespace: str | None, key: str, part: int) -> None:
    """Change one stored row of a run behind the store's back."""
    with closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(
            f"UPDATE agentflow_durable_runs SET {change} "
            "WHERE namespace = ? AND key = ? AND part = ?",
            (namespace or "", key, part),
        ).rowcount
    assert changed == 1, f"no stored row for {(namespace, key, part)}"


def contents(path: Path) -> tuple[list[str], list[str]]:
    """The files beside the database and its tables, read without creating either."""
    files = sorted(p.name for p in path.parent.glob(f"{path.name}*"))
    if not path.exists():
        return files, []
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    return files, [name for (name,) in tables]


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    path = tmp_path / "durable.db"

    async def corrupt(namespace: str | None, key: str) -> None:
        await asyncio.to_thread(
            overwrite, path, "body = x'7b226e6f74223a20317d'", namespace, key, 1
        )

    yield DurableHarness(
        name="sqlite",
        stores=lambda namespace: SqliteDurableStore(path, namespace=namespace),
        event_stores=lambda namespace: SqliteRunEventStore(path, namespace=namespace),
        corrupt=corrupt,
        readers=lambda namespace: SqliteDurableStore(path, namespace=namespace, create=False),
        contents=lambda: asyncio.to_thread(contents, path),
    )
