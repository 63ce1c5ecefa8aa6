"""SQLite: the shared writer survives anything a job raises, old files migrate,
new files are owner-only, and cursors outlive the checkpointer that issued them."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint import Checkpoint
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.sqlite import SCHEMA_VERSION, SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint


class Boom(BaseException):
    """What a careless redactor might raise: not even an Exception."""


def _boom(value: Any) -> Any:
    raise Boom("redactor exploded")


class ExplodingCodec(JsonCodec):
    __slots__ = ()

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        raise SystemExit("codec exploded")


async def test_a_redactor_base_exception_never_kills_the_shared_writer(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SqliteCheckpointer(path) as healthy, SqliteCheckpointer(path, redact=_boom) as bad:
        await healthy.put(make_checkpoint("before", 0))
        with pytest.raises(Boom):
            await bad.put(make_checkpoint("t", 0))
        with pytest.raises(SystemExit):
            async with SqliteCheckpointer(path, codec=ExplodingCodec()) as worse:
                await worse.put(make_checkpoint("t", 0))
        results = await asyncio.wait_for(
            asyncio.gather(*(healthy.put(make_checkpoint(f"after-{i}", 0)) for i in range(8))),
            timeout=10,
        )
        assert len(results) == 8
        assert await healthy.get("t") is None
        assert await healthy.get("after-7") is not None
    # close() returned: both worker threads stopped (a dead writer would hang here).


async def test_a_failed_group_fails_only_its_own_callers(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SqliteCheckpointer(path) as cp:
        await cp.put(make_checkpoint("t", 0))
        pair = cp._started()

        def explode(conn: sqlite3.Connection) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            await pair.writer.submit(lambda: explode)
        await asyncio.wait_for(cp.put(make_checkpoint("t", 1)), timeout=10)
        assert [c.step async for c in cp.history("t")] == [0, 1]


#: The tables of schema version 1, as the previous release created them.
_VERSION_1 = (
    "CREATE TABLE agentflow_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO agentflow_meta VALUES ('schema_version', 1)",
    """CREATE TABLE agentflow_checkpoints (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    step INTEGER NOT NULL, revision INTEGER NOT NULL, ts_us INTEGER NOT NULL, ts TEXT NOT NULL,
    interrupted INTEGER NOT NULL, done INTEGER NOT NULL, wake_at TEXT, payload BLOB NOT NULL,
    PRIMARY KEY (namespace, thread, step))""",
    """CREATE TABLE agentflow_threads (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    latest_step INTEGER NOT NULL, interrupted INTEGER NOT NULL, done INTEGER NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
)


def _version_1_file(path: Path, rows: list[Checkpoint]) -> None:
    codec = JsonCodec()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in _VERSION_1:
            conn.execute(statement)
        for cp in rows:
            payload = codec.encode(cp, RecordKey("", cp.thread, cp.step))
            flags = (int(cp.interrupted), int(cp.done))
            conn.execute(
                "INSERT INTO agentflow_checkpoints VALUES ('', ?, ?, 1, 0, ?, ?, ?, ?, ?)",
                (cp.thread, cp.step, cp.ts, *flags, cp.wake_at, payload),
            )
            conn.execute(
                "INSERT OR REPLACE INTO agentflow_threads VALUES ('', ?, ?, ?, ?, ?, ?)",
                (cp.thread, cp.step, *flags, cp.ts, cp.wake_at),
            )


async def test_a_version_1_file_is_migrated_and_keeps_reading(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ts = "2026-01-01T00:00:00+00:00"
    rows = [
        make_checkpoint("done", 0, ts=ts),
        make_checkpoint("human", 0, ts=ts, next=("n",), interrupted=True),
        make_checkpoint("timer", 0, ts=ts, next=("n",)),
        make_checkpoint(
            "timer", 1, ts=ts, next=("n",), interrupted=True, wake_at="2026-01-01T03:00:00+02:00"
        ),
    ]
    _version_1_file(path, rows)
    async with SqliteCheckpointer(path) as cp:
        got = await cp.get("timer")
        assert got is not None and got.step == 1 and got.revision == 1
        assert [c.step async for c in cp.history("timer")] == [0, 1]
        due = await cp.list_due("2026-01-01T01:00:00Z")
        assert [i.thread for i in due.threads] == ["timer"]
        assert (await cp.list_due("2026-01-01T00:59:59Z")).threads == []
        for status, thread in (("done", "done"), ("interrupted", "human"), ("waiting", "timer")):
            page = await cp.list_threads_page(status=status)  # type: ignore[arg-type]
            assert [i.thread for i in page.threads] == [thread]
        await cp.put(make_checkpoint("timer", 2, next=("n",)))
        assert (await cp.list_due("2027-01-01T00:00:00Z")).threads == []
    with contextlib.closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT value FROM agentflow_meta WHERE key='schema_version'")
        assert version.fetchone()[0] == SCHEMA_VERSION


async def test_a_new_store_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "nested" / "c.db"
    async with SqliteCheckpointer(path) as cp:
        await cp.put(make_checkpoint("t", 0))
        for made in (path, Path(f"{path}-wal")):
            assert stat.S_IMODE(made.stat().st_mode) == 0o600, made
        for folder in (path.parent, path.parent.parent):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    shared = tmp_path / "shared.db"
    async with SqliteCheckpointer(shared, secure_permissions=False) as cp:
        await cp.put(make_checkpoint("t", 0))
    assert stat.S_IMODE(shared.stat().st_mode) & 0o044


async def test_cursors_outlive_the_checkpointer_that_issued_them(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SqliteCheckpointer(path) as cp:
        for name in "abcd":
            await cp.put(make_checkpoint(name, 0))
        cursor = (await cp.list_threads_page(limit=2)).next_cursor
    assert cursor is not None
    async with SqliteCheckpointer(path) as reopened:
        rest = await reopened.list_threads_page(cursor=cursor)
    assert [i.thread for i in rest.threads] == ["c", "d"]
