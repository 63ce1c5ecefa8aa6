from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

from agentflow.checkpoint.sealing import KeyRing
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


def _where(namespace: str | None, key: str, part: str) -> tuple[str, tuple[str | int, ...]]:
    """The column and row holding one part: the body row's body, a head row's
    journal column (a JSON array of every entry of its kind), an event's payload."""
    if part == "event":
        return "event FROM agentflow_durable_events WHERE namespace = ? AND event_id = ?", (
            namespace or "",
            key,
        )
    column, row = ("body", 1) if part == "body" else (f"{part.partition('.')[0]}_journal", 0)
    runs = "agentflow_durable_runs WHERE namespace = ? AND key = ? AND part = ?"
    return f"{column} FROM {runs}", (namespace or "", key, row)


def read_part(path: Path, namespace: str | None, key: str, part: str) -> bytes:
    """The stored bytes of one part, read behind the store's back."""
    selected, params = _where(namespace, key, part)
    with closing(sqlite3.connect(path)) as conn:
        conn.text_factory = bytes
        (found,) = conn.execute(f"SELECT {selected}", params).fetchone()
    assert isinstance(found, bytes), f"no stored {part} for {(namespace, key)}"
    return found


def write_part(path: Path, namespace: str | None, key: str, part: str, data: bytes) -> None:
    """Replace the stored bytes of one part (text columns keep their type)."""
    selected, params = _where(namespace, key, part)
    column, _, rest = selected.partition(" FROM ")
    table, _, where = rest.partition(" WHERE ")
    value = "?" if part in ("body", "event") else "CAST(? AS TEXT)"
    with closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(
            f"UPDATE {table} SET {column} = {value} WHERE {where}", (data, *params)
        ).rowcount
    assert changed == 1, f"no stored {part} for {(namespace, key)}"


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

    def stores(namespace: str | None, sealing: KeyRing | None = None) -> SqliteDurableStore:
        return SqliteDurableStore(path, namespace=namespace, sealing=sealing)

    def event_stores(namespace: str | None, sealing: KeyRing | None = None) -> SqliteRunEventStore:
        return SqliteRunEventStore(path, namespace=namespace, sealing=sealing)

    yield DurableHarness(
        name="sqlite",
        stores=stores,
        event_stores=event_stores,
        corrupt=corrupt,
        readers=lambda namespace: SqliteDurableStore(path, namespace=namespace, create=False),
        contents=lambda: asyncio.to_thread(contents, path),
        sealed_stores=stores,
        sealed_event_stores=event_stores,
        read_part=lambda *where: asyncio.to_thread(read_part, path, *where),
        write_part=lambda *change: asyncio.to_thread(write_part, path, *change),
    )
