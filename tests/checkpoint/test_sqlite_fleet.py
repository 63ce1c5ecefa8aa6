"""The SQLite store's fleet queries seek indexes, never read every run: their query plans."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from agentflow.checkpoint.fleet import held_params
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.sqlite.fleet import _DUE, _HELD, _LIVE, _SCOPES
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.testing.harness import make_record

_DIGEST = "a" * 64


async def _fill(store: SqliteCheckpointer) -> None:
    for index in range(20):
        thread = f"t{index:02}"
        wake = "2026-06-01T00:00:00+00:00" if index % 2 else None
        step = make_checkpoint(thread, 0, next=("n",), interrupted=True, wake_at=wake)
        await store.put(step)
        await store.create(make_record(thread))


async def test_sqlite_batches_holders_and_limits_seek_indexes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteCheckpointer(path) as store:
        await _fill(store)
    params = {
        "namespace": "",
        "now_us": 10**16,
        "now": 0,
        "exclude": "[]",
        "definitions": f'["{_DIGEST}"]',
        "lease_ms": 1,
        "limit": 10,
    }
    queries = [
        (_DUE.replace("{definition}", _SCOPES["definitions"]), params),
        (_LIVE, params),
        (_HELD, held_params("", "w-1", None, 10)),
    ]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for sql, args in queries:
            plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            # (SCAN json_each: the JSON array of the parameter, never a table)
            assert "SEARCH" in plan and "SCAN agentflow" not in plan, plan
            assert "TEMP B-TREE" not in plan, plan
