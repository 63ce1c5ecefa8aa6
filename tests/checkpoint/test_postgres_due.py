"""list_due and the status filter read O(page) rows on PostgreSQL, however many threads wait."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from tests.backends.postgres import (
    Connection,
    admin_session,
    logging_pool,
    scratch_table,
    settle_logs,
)

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)

SUSPENDED = 100_000
DUE = 1_000
NOW = "2026-06-01T12:00:00+00:00"

#: ``SUSPENDED`` threads waiting on a timer, the first ``DUE`` of them due at NOW,
#: and as many waiting for a human; one checkpoint each, as puts would leave them.
_FILL = """
INSERT INTO "{t}" SELECT '', k || lpad(g::text, 7, '0'), 0, 1, 0, '', true, false, w, '\\x00', u
    FROM generate_series(0, {n} - 1) AS g, LATERAL (VALUES
        ('t', CASE WHEN g < {due} THEN '2026-06-01T11:00:00Z' ELSE '2026-07-01T00:00:00Z' END,
         CASE WHEN g < {due} THEN 1780311600000000 ELSE 1782864000000000 END),
        ('h', NULL, NULL)) AS v(k, w, u);
INSERT INTO "{t}_threads" SELECT namespace, thread, step, interrupted, done, ts, wake_at,
    CASE WHEN wake_at IS NULL THEN 'interrupted' ELSE 'waiting' END, wake_us FROM "{t}";
ANALYZE "{t}"; ANALYZE "{t}_threads";
"""


def _rows_read(node: dict[str, Any]) -> int:
    """Rows every scan of a plan produced or filtered away (what it read from the table)."""
    read = 0
    if "Scan" in node["Node Type"]:
        read += node["Actual Rows"] * node["Actual Loops"]
        read += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return read + sum(_rows_read(child) for child in node.get("Plans", []))


async def _rows_read_by(admin: Connection, log: list[tuple[str, tuple[object, ...]]]) -> int:
    total = 0
    for query, args in log:
        plan = await admin.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", *args)
        total += _rows_read(orjson.loads(plan)[0]["Plan"])
    return total


@pytest.mark.slow
async def test_a_due_pass_reads_at_most_twice_the_due_rows(admin: Connection, table: str) -> None:
    log: list[tuple[str, tuple[object, ...]]] = []
    pool = await logging_pool(log)
    try:
        async with PostgresCheckpointer(pool=pool, table=table) as cp:
            await cp.setup()
            await admin.execute(_FILL.format(t=table, n=SUSPENDED, due=DUE))
            await cp.list_threads_page(limit=1)  # the cursor secret, outside the count
            await settle_logs()
            log.clear()
            found: list[str] = []
            cursor: str | None = None
            while True:
                page = await cp.list_due(NOW, limit=100, cursor=cursor)
                found.extend(info.thread for info in page.threads)
                if (cursor := page.next_cursor) is None:
                    break
            await settle_logs()
            due_pass = list(log)
            log.clear()
            page = await cp.list_threads_page(limit=100, status="interrupted")
            await settle_logs()
            status_page = list(log)
    finally:
        await pool.close()
    assert found == [f"t{i:07d}" for i in range(DUE)]
    assert len(due_pass) == DUE // 100
    assert DUE <= await _rows_read_by(admin, due_pass) <= 2 * DUE
    assert [i.thread for i in page.threads] == [f"h{i:07d}" for i in range(100)]
    assert await _rows_read_by(admin, status_page) <= 101


async def test_a_put_moves_a_thread_in_and_out_of_the_due_list(table: str) -> None:
    async with PostgresCheckpointer(table=table) as cp:
        wait = {"next": ("n",), "interrupted": True, "wake_at": "2026-06-01T11:00:00Z"}
        await cp.put(make_checkpoint("t", 0, **wait))
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["t"]
        await cp.put(make_checkpoint("t", 0, next=("n",)), if_revision=1)
        assert (await cp.list_due(NOW)).threads == []
        await cp.put(make_checkpoint("t", 1, **wait), if_revision=0)
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["t"]
        await cp.put(make_checkpoint("t", 0, **wait))  # an older step leaves the summary be
        await cp.prune("t", before_step=1)
        info = (await cp.list_due(NOW)).threads
        assert [(i.thread, i.latest_step, i.status) for i in info] == [("t", 1, "waiting")]
