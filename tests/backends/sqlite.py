"""The SQLite store's harness: one file, and the hooks that damage it behind the store's back."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import BackendHarness

_STEP = "WHERE namespace = ? AND thread = ? AND step = ?"
HEAD, BODY = 0, 1


def execute(path: Path | str, sql: str, *args: Any) -> list[Any]:
    """One statement on ``path``, committed, from a connection of its own."""
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql, args).fetchall()


def _changed(path: Path | str, sql: str, *args: Any) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(sql, args).rowcount
    assert changed == 1, f"no stored row for {args[-3:]}"


def overwrite(path: Path | str, change: str, namespace: str | None, key: str, part: int) -> None:
    """Change one stored row of a run (its head or body row) behind the store's back."""
    where = "WHERE namespace = ? AND key = ? AND part = ?"
    _changed(path, f"UPDATE agentflow_runs SET {change} {where}", namespace or "", key, part)


def _where(namespace: str | None, key: str, part: str) -> tuple[str, str, tuple[object, ...]]:
    """The table, column and row holding one part: the body row's body, a journal
    entry's row, an event's payload."""
    if part == "event":
        return "agentflow_events", "event", (namespace or "", key)
    if part == "body":
        return "agentflow_runs", "body", (namespace or "", key, BODY)
    kind, _, index = part.partition(".")
    return "agentflow_journal", "entry", (namespace or "", key, kind, int(index))


_KEYS = {
    "agentflow_events": "namespace = ? AND event_id = ?",
    "agentflow_runs": "namespace = ? AND key = ? AND part = ?",
    "agentflow_journal": "namespace = ? AND key = ? AND kind = ? AND idx = ?",
}


def read_part(path: Path | str, namespace: str | None, key: str, part: str) -> bytes:
    """The stored bytes of one part, read behind the store's back."""
    table, column, params = _where(namespace, key, part)
    rows = execute(path, f"SELECT {column} FROM {table} WHERE {_KEYS[table]}", *params)
    assert rows and isinstance(rows[0][0], bytes), f"no stored {part} for {(namespace, key)}"
    found: bytes = rows[0][0]
    return found


def write_part(path: Path | str, namespace: str | None, key: str, part: str, data: bytes) -> None:
    """Replace the stored bytes of one part."""
    table, column, params = _where(namespace, key, part)
    _changed(path, f"UPDATE {table} SET {column} = ? WHERE {_KEYS[table]}", data, *params)


def contents(path: Path) -> tuple[list[str], list[str]]:
    """The files beside the database and its tables, read without creating either."""
    files = sorted(p.name for p in path.parent.glob(f"{path.name}*"))
    if not path.exists():
        return files, []
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    return files, [name for (name,) in tables]


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    path = tmp_path / "checkpoints.db"

    def step(change: str, namespace: str | None, thread: str, number: int, *values: object) -> None:
        sql = f"UPDATE agentflow_checkpoints SET {change} {_STEP}"
        _changed(path, sql, *values, namespace or "", thread, number)

    def stored_payload(namespace: str | None, thread: str, number: int) -> bytes:
        sql = f"SELECT payload FROM agentflow_checkpoints {_STEP}"
        rows = execute(path, sql, namespace or "", thread, number)
        assert len(rows) == 1, f"no stored row for {(namespace, thread, number)}"
        payload: bytes = rows[0][0]
        return payload

    async def corrupt(namespace: str | None, thread: str, number: int) -> None:
        await asyncio.to_thread(step, "payload = x'ff7b'", namespace, thread, number)

    async def damage_revision(namespace: str | None, thread: str, number: int) -> None:
        await asyncio.to_thread(step, "revision = 'abc'", namespace, thread, number)

    async def read_payload(namespace: str | None, thread: str, number: int) -> bytes:
        return await asyncio.to_thread(stored_payload, namespace, thread, number)

    async def write_payload(namespace: str | None, thread: str, number: int, data: bytes) -> None:
        await asyncio.to_thread(step, "payload = ?", namespace, thread, number, data)

    async def corrupt_run(namespace: str | None, key: str) -> None:
        body = "body = x'7b226e6f74223a20317d'"  # {"not": 1}
        await asyncio.to_thread(overwrite, path, body, namespace, key, BODY)

    yield BackendHarness(
        name="sqlite",
        factory=SqliteCheckpointer,
        kwargs={"path": str(path)},
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
        corrupt_run=corrupt_run,
        contents=lambda: asyncio.to_thread(contents, path),
        read_part=lambda *where: asyncio.to_thread(read_part, path, *where),
        write_part=lambda *change: asyncio.to_thread(write_part, path, *change),
    )
