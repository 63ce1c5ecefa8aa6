"""The SQLite thread summary of schema version 5: it holds the latest step's status, not
its number or instant (read from the step's own row), so a put that keeps the thread's
status writes the step's pages alone; a file of version 4 migrates to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.base import ThreadInfo
from agentflow.checkpoint.sqlite import SCHEMA_VERSION, SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.testing import make_record
from agentflow.errors import CheckpointCorrupted
from tests.backends.sqlite import execute

_WAKE = "2026-01-01T03:00:00+00:00"

#: The summary table and its indexes as schema version 4 created them.
_VERSION_4_SUMMARY = (
    """CREATE TABLE agentflow_threads (namespace TEXT NOT NULL, thread TEXT NOT NULL,
    latest_step INTEGER NOT NULL, interrupted INTEGER NOT NULL, done INTEGER NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT, status TEXT NOT NULL DEFAULT '', wake_us INTEGER,
    run_status TEXT, PRIMARY KEY (namespace, thread)) WITHOUT ROWID""",
    """CREATE INDEX agentflow_threads_by_status
    ON agentflow_threads (namespace, coalesce(run_status, status), thread)""",
    """CREATE INDEX agentflow_threads_due
    ON agentflow_threads (namespace, wake_us, thread) WHERE wake_us IS NOT NULL""",
)
#: Version 4's summary of every thread: its latest step's number, instant and status.
_VERSION_4_ROWS = """INSERT INTO agentflow_threads SELECT c.namespace, c.thread, c.step,
    c.interrupted, c.done, c.ts, c.wake_at, c.status, c.wake_us, s.run_status
    FROM agentflow_checkpoints c JOIN summaries s ON s.namespace = c.namespace
    AND s.thread = c.thread AND c.step = (SELECT max(step) FROM agentflow_checkpoints m
    WHERE m.namespace = c.namespace AND m.thread = c.thread)"""


def _as_version_4(path: Path) -> None:
    """Rewrite a version-5 file as version 4 kept it: the summary with its latest step's
    number and instant, every other table as it is."""
    execute(
        path,
        "CREATE TABLE summaries AS SELECT namespace, thread, run_status FROM agentflow_threads",
    )
    execute(path, "DROP TABLE agentflow_threads")
    for statement in _VERSION_4_SUMMARY:
        execute(path, statement)
    execute(path, _VERSION_4_ROWS)
    execute(path, "DROP TABLE summaries")
    execute(path, "UPDATE agentflow_meta SET value = 4 WHERE key = 'schema_version'")


async def _listings(store: SqliteCheckpointer) -> dict[str, list[ThreadInfo]]:
    statuses = ("running", "interrupted", "waiting", "done", "failed")
    found: dict[str, list[ThreadInfo]] = {"all": await store.list_threads()}
    for status in statuses:
        found[status] = (await store.list_threads_page(status=status)).threads  # type: ignore[arg-type]
    found["due"] = (await store.list_due("2026-01-01T04:00:00Z")).threads
    return found


async def _threads_of_every_status(store: SqliteCheckpointer) -> None:
    await store.put(make_checkpoint("done", 0, next=("n",)))
    await store.put(make_checkpoint("done", 1))
    await store.put(make_checkpoint("human", 0, next=("n",), interrupted=True))
    for step in range(3):
        await store.put(make_checkpoint("running", step, next=("n",)))
    await store.put(make_checkpoint("timer", 0, next=("n",)))
    await store.put(make_checkpoint("timer", 1, next=("n",), interrupted=True, wake_at=_WAKE))
    terminal = {"status": "failed", "error": {"code": "aborted"}}
    await store.create(
        make_record("failed", status=CheckpointStatus.FAILED, terminal_result=terminal)
    )
    await store.put(make_checkpoint("failed", 0, next=("n",)))


async def test_a_version_4_file_migrates_and_lists_every_thread_as_before(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    async with SqliteCheckpointer(path) as store:
        await _threads_of_every_status(store)
        before = await _listings(store)
    assert [i.thread for i in before["all"]] == ["done", "failed", "human", "running", "timer"]
    assert [i.thread for i in before["failed"]] == ["failed"]
    assert [i.thread for i in before["due"]] == ["timer"]
    _as_version_4(path)
    columns = "SELECT name FROM pragma_table_info('agentflow_threads')"
    assert ("latest_step",) in execute(path, columns)
    async with SqliteCheckpointer(path) as store:
        assert await _listings(store) == before
        await store.put(make_checkpoint("timer", 2))
        [timer] = [i for i in await store.list_threads() if i.thread == "timer"]
        assert (timer.latest_step, timer.status) == (2, "done")
    assert {name for (name,) in execute(path, columns)} == {
        "namespace",
        "thread",
        "interrupted",
        "done",
        "wake_at",
        "status",
        "wake_us",
        "run_status",
    }
    version = "SELECT value FROM agentflow_meta WHERE key = 'schema_version'"
    assert execute(path, version) == [(SCHEMA_VERSION,)] == [(5,)]


def _log_summary_writes(path: Path) -> None:
    """Record every write of a summary row, from inside the store's own transactions."""
    execute(path, "CREATE TABLE summary_writes (seq INTEGER PRIMARY KEY, kind TEXT, thread TEXT)")
    for kind in ("INSERT", "UPDATE"):
        execute(
            path,
            f"""CREATE TRIGGER log_{kind.lower()} AFTER {kind} ON agentflow_threads BEGIN
            INSERT INTO summary_writes (kind, thread) VALUES ('{kind.lower()}', new.thread); END""",
        )


def _summary_writes(path: Path) -> list[Any]:
    return execute(path, "SELECT kind, thread FROM summary_writes ORDER BY seq")


async def test_a_put_that_keeps_the_status_leaves_the_summary_unwritten(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SqliteCheckpointer(path) as store:
        await store.put(make_checkpoint("other", 0))
        _log_summary_writes(path)
        steps = [
            make_checkpoint("t", 0, next=("n",)),
            make_checkpoint("t", 1, next=("n",)),
            make_checkpoint("t", 2, next=("n",)),
            make_checkpoint("t", 3, next=("n",), interrupted=True),
            make_checkpoint("t", 4, next=("n",), interrupted=True),
            make_checkpoint("t", 5, next=("n",), interrupted=True, wake_at=_WAKE),
            make_checkpoint("t", 6, next=("n",), interrupted=True, wake_at=_WAKE),
            make_checkpoint("t", 7),
        ]
        for cp in steps:
            await store.put(cp)
            [info] = [i for i in await store.list_threads() if i.thread == "t"]
            stored = await store.get("t")
            assert stored is not None
            assert (info.latest_step, info.ts) == (cp.step, stored.ts)
            assert (info.interrupted, info.wake_at, info.done) == (
                cp.interrupted,
                cp.wake_at,
                not cp.next and not cp.interrupted,
            )
        # the first put makes the summary; only a changed status (steps 3, 5, 7) rewrites it
        assert _summary_writes(path) == [("insert", "t")] + [("update", "t")] * 3


async def test_a_put_below_the_latest_step_leaves_the_summary_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SqliteCheckpointer(path) as store:
        await store.put(make_checkpoint("t", 0, next=("n",)))
        await store.put(make_checkpoint("t", 1, next=("n",)))
        await store.put(make_checkpoint("t", 2, next=("n",), interrupted=True, wake_at=_WAKE))
        _log_summary_writes(path)
        await store.put(make_checkpoint("t", 1))  # rewritten as done: not the latest step
        [info] = await store.list_threads()
        assert (info.latest_step, info.status, info.wake_at) == (2, "waiting", _WAKE)
        assert _summary_writes(path) == []
        await store.prune("t", before_step=3)
        assert await store.list_threads() == []


@pytest.mark.parametrize("listing", ["threads", "status", "due"])
async def test_a_summary_without_a_stored_step_is_damage(tmp_path: Path, listing: str) -> None:
    path = tmp_path / "store.db"
    async with SqliteCheckpointer(path) as store:
        await store.put(make_checkpoint("t", 0, next=("n",), interrupted=True, wake_at=_WAKE))
        execute(path, "DELETE FROM agentflow_checkpoints")
        with pytest.raises(CheckpointCorrupted, match="without a stored step"):
            if listing == "threads":
                await store.list_threads()
            elif listing == "status":
                await store.list_threads_page(status="waiting")
            else:
                await store.list_due("2026-01-01T04:00:00Z")
