"""The PostgreSQL store's fleet statements read indexes, never every run: their plans."""

from __future__ import annotations

import uuid

from agentflow.checkpoint.fleet import DueClaim
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.postgres.fleet import _HELD as PG_HELD
from agentflow.checkpoint.postgres.fleet import _claim_text
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.testing.harness import make_record
from tests.backends.postgres import DSN, admin_connection

_DIGEST = "a" * 64


async def _fill(store: PostgresCheckpointer) -> None:
    for index in range(20):
        thread = f"t{index:02}"
        wake = "2026-06-01T00:00:00+00:00" if index % 2 else None
        step = make_checkpoint(thread, 0, next=("n",), interrupted=True, wake_at=wake)
        await store.put(step)
        await store.create(make_record(thread))


async def test_postgres_holders_and_limits_read_the_claimed_runs_index() -> None:
    table = f"plans_{uuid.uuid4().hex[:10]}"
    async with PostgresCheckpointer(DSN, table=table) as store:
        await _fill(store)
        names = store._sql.names
    admin = await admin_connection()
    try:
        async with admin.transaction():
            await admin.execute("SET LOCAL enable_seqscan = off")  # tiny tables: seek or fail
            held = await admin.fetch(
                "EXPLAIN "
                + PG_HELD.format(**names)
                .replace(":namespace", "''")
                .replace(":lo", "'w-1#'")
                .replace(":hi", "'w-1$'")
                .replace(":after", "''")
                .replace(":limit", "10")
            )
            plan = " ".join(row[0] for row in held)
            assert "Index" in plan and "Seq Scan" not in plan, plan
            request = DueClaim(10**16, ("w#1",), 1, (_DIGEST,), 3, frozenset())
            text = _claim_text(request).format(**names)
            statement = "EXPLAIN " + text
            for name, value in (
                (":namespace", "''"),
                (":now_us", "10000000000000000"),
                (":definitions", f"ARRAY['{_DIGEST}']"),
                (":max_concurrent", "3"),
                (":exclude", "ARRAY[]::text[]"),
                (":tokens", "ARRAY['w#1']"),
                (":lease_ms", "1"),
            ):
                statement = statement.replace(name, value)
            plan = " ".join(row[0] for row in await admin.fetch(statement))
            assert "Seq Scan" not in plan, plan
    finally:
        for (name,) in await admin.fetch(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", f"{table}%"
        ):
            await admin.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
        await admin.close()
