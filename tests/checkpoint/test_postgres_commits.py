"""What a step costs on PostgreSQL in transaction commits (each one a WAL flush at
``synchronous_commit = on``), counted by the server.

The count is ``pg_stat_database.xact_commit`` of a database of the test's own, so
no other client's transactions are in it, over a pool of one connection whose
every statement is logged: each statement outside ``BEGIN`` is one implicit
transaction, the statements from ``BEGIN`` to ``COMMIT`` one explicit transaction,
and the server's count must equal the log's. Those that write
(``INSERT``/``UPDATE``/``DELETE``) are the commits that flush the WAL; the others
are reads. A backend reports its statistics when idle, at most once a second and
only while a relation's counts are pending too, so the connection asks for a
flush with a statement that scans a catalog.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.testing import make_tool_entry
from agentflow.durable.testing.claims import claimed
from agentflow.runtime import END, START, Graph, NodeContext, ToolCall
from tests.backends.postgres import DSN, Connection, admin_session, settle_logs

admin = pytest.fixture(admin_session)
STEPS = 20
_FLUSH = "SELECT pg_stat_force_next_flush() FROM pg_namespace LIMIT 1"
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b")


def _transactions(log: list[str]) -> list[str]:
    """The logged statements as transactions: one per statement outside ``BEGIN``,
    the statements of a ``BEGIN`` ... ``COMMIT`` block joined into one."""
    transactions: list[str] = []
    block: list[str] | None = None
    for text in log:
        word = text.strip().rstrip(";").upper()
        if word.startswith("BEGIN"):
            block = []
        elif word == "COMMIT" and block is not None:
            transactions.append("; ".join(block))
            block = None
        elif block is not None:
            block.append(text)
        else:
            transactions.append(text)
    assert block is None, "a transaction was left open"
    return transactions


@dataclass
class Counted:
    """The transactions of one block: the server's count and the transactions sent."""

    commits: int = 0
    statements: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return sum(1 for text in self.statements if _WRITES.search(text))


@dataclass
class PrivateDatabase:
    admin: Connection
    name: str
    pool: Any
    log: list[str]

    async def _server_count(self) -> int:
        count: int = await self.admin.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", self.name
        )
        return count

    @asynccontextmanager
    async def counting(self) -> AsyncIterator[Counted]:
        counted = Counted()
        await self.pool.fetchval(_FLUSH)
        start = await self._server_count()
        await settle_logs()
        self.log.clear()
        yield counted
        await settle_logs()
        counted.statements = _transactions(self.log)
        await self.pool.fetchval(_FLUSH)
        for _ in range(200):  # flushed counts land in shared memory at once; a margin
            end = await self._server_count()
            if end > start:
                break
            await asyncio.sleep(0.01)
        counted.commits = end - start - 1  # the flush is a transaction too
        assert counted.commits == len(counted.statements), counted.statements


@pytest.fixture
async def database(admin: Connection) -> AsyncIterator[PrivateDatabase]:
    name = f"af_commits_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    log: list[str] = []

    async def init(conn: Connection) -> None:
        conn.add_query_logger(lambda query: log.append(query.query))

    async def keep(conn: Connection) -> None:
        return None  # no reset query on release (a transaction of its own), as our pool

    dsn = DSN.rsplit("/", 1)[0] + f"/{name}"
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1, init=init, reset=keep)
    try:
        assert await pool.fetchval("SHOW synchronous_commit") == "on"
        yield PrivateDatabase(admin, name, pool, log)
    finally:
        await pool.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def test_a_step_commit_is_one_transaction_commit(database: PrivateDatabase) -> None:
    async with PostgresCheckpointer(pool=database.pool) as store:
        record = await claimed(store, "t")
        await store.put(make_checkpoint("t", 0, next=("n",)))
        record = await store.record_operation(
            record, make_tool_entry("t", 1).start(), claim_token="owner-a"
        )
        for both, commits in ((False, STEPS), (True, 2 * STEPS)):
            async with database.counting() as counted:
                for _ in range(STEPS):  # each step: a receipt and the next call's start
                    done = record.tool_journal[-1].succeed({"ok": 1})
                    nxt = make_tool_entry("t", 1, len(record.tool_journal) + 1).start()
                    cp = make_checkpoint("t", len(record.tool_journal), next=("n",))
                    if both:  # what commit_step replaces: the record first, then the step
                        entries = [done, nxt]
                        record = await store.record_operations(
                            record, entries, claim_token="owner-a"
                        )
                        await store.put(cp, if_revision=0)
                    else:
                        record = await store.commit_step(
                            cp, record, [done, nxt], claim_token="owner-a"
                        )
            assert (counted.commits, counted.writes) == (commits, commits)


async def _charge(call: ToolCall) -> dict[str, Any]:
    return {"charged": call.arguments["i"]}


def _steps(*, idempotent: bool) -> Graph:
    """``STEPS`` steps, each one call."""

    async def tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.tool("charge", {"i": state["i"]}, _charge, idempotent=idempotent)
        return {"i": state["i"] + 1}

    graph = Graph("steps").add_node("tick", tick).add_edge(START, "tick")
    again = lambda s: "tick" if s["i"] < STEPS else END  # noqa: E731
    return graph.add_conditional_edges("tick", again, ["tick", END])


def _one_node(calls: int) -> Graph:
    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"receipts": [await ctx.tool("charge", {"i": i}, _charge) for i in range(calls)]}

    return Graph("one-node").add_node("n", charge).add_edge(START, "n")


@pytest.mark.parametrize(
    ("graph", "writes"),
    [
        # the run's start (the input's put, the record's create and claim: one
        # transaction); per step the call's started entry and the step's commit (its
        # receipt riding it); the finalize.
        (_steps(idempotent=False), 1 + 2 * STEPS + 1),
        # An idempotent call writes nothing before it goes out: one commit per step.
        (_steps(idempotent=True), 1 + STEPS + 1),
        # 20 calls in one node: 20 started entries (each receipt riding the next), one step.
        (_one_node(STEPS), 1 + STEPS + 1 + 1),
    ],
    ids=["at-most-once", "idempotent", "twenty-calls-one-node"],
)
async def test_commits_of_a_run(database: PrivateDatabase, graph: Graph, writes: int) -> None:
    async with PostgresCheckpointer(pool=database.pool) as store:
        compiled = graph.compile(store)
        # a first run sets up the schema and reads the store's cursor secret (once per
        # process: the lifecycle events' cursors are signed with it)
        await compiled.run({"i": 0}, thread="warm-up")
        async with database.counting() as counted:
            result = await compiled.run({"i": 0}, thread="t")
        assert result.status == "done"
    # The reads the runtime makes (the thread's latest step and its record, before it
    # starts the run) commit nothing that needs a WAL flush.
    assert (counted.writes, counted.commits - counted.writes) == (writes, 2)
