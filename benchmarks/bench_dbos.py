"""Durable steps against DBOS Transact, on SQLite and PostgreSQL, commits counted.

The workload is the one a durable agent makes: a workflow of 20 steps, each
one journaled external call (``ctx.tool``; a ``@DBOS.step`` for DBOS), and a
variant whose one node makes the 20 calls (for DBOS the same 20 steps: it has
no node). Calls are either idempotent (agentflow ``idempotent=True``: nothing
is written before the call goes out, as a DBOS step) or at-most-once (the
default: a ``started`` entry is durable before the call goes out).

Equal durability: SQLite in WAL mode with ``synchronous=FULL`` for both (the
DBOS file is switched to WAL before DBOS opens it; FULL is SQLite's default),
PostgreSQL with ``synchronous_commit=on`` (the server's default). Both run in
this process, interleaved run by run in blocks, and the steps/s ratio is the
median of the blocks' ratios. Commits are write transactions: for agentflow
the store's write methods called (each is one transaction on these
backends), for DBOS the transactions of its system database that ran an
``INSERT``, ``UPDATE`` or ``DELETE`` (read-only ones are not counted).
"""

from __future__ import annotations

import functools
import importlib
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agentflow.checkpoint.store import Store
from agentflow.checkpoint.stores import open_store
from agentflow.runtime import END, START, CompiledGraph, Graph, NodeContext
from agentflow.runtime.calls import ToolCall
from benchmarks.common import Table

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DBOS_PG = os.environ.get(
    "AGENTFLOW_DBOS_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentflow_dbos_bench"
)
STEPS = 20
#: The store methods that are one write transaction each.
_WRITES = (
    "put",
    "start_run",
    "create",
    "claim",
    "renew_claim",
    "record_operation",
    "record_operations",
    "commit_step",
    "progress",
    "suspend",
    "commit",
    "finalize_claimed",
    "finalize",
)
_WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _count_store_writes(store: Store, counter: Counter[str]) -> None:
    """Count each write method ``store`` is called with (one transaction each)."""
    for name in _WRITES:
        method = getattr(store, name)

        @functools.wraps(method)
        async def counted(*args: Any, _m: Any = method, _n: str = name, **kw: Any) -> Any:
            counter[_n] += 1
            return await _m(*args, **kw)

        setattr(store, name, counted)


def _tool(call: ToolCall) -> dict[str, Any]:
    return {"ok": call.arguments["i"]}


def _graphs(idempotent: bool) -> tuple[Graph, Graph]:
    """The 20-step loop and the one node making 20 calls."""

    async def step(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.tool("work", {"i": state["i"]}, _tool, idempotent=idempotent)
        return {"i": state["i"] + 1}

    def route(state: Mapping[str, Any]) -> str:
        return END if state["i"] >= STEPS else "step"

    loop = Graph(f"loop-{idempotent}").add_node("step", step).add_edge(START, "step")
    loop.add_conditional_edges("step", route, ["step", END])

    async def calls(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        for i in range(STEPS):
            await ctx.tool("work", {"i": i}, _tool, idempotent=idempotent, key=f"c{i}")
        return {"i": STEPS}

    node = Graph(f"node-{idempotent}").add_node("calls", calls).add_edge(START, "calls")
    node.add_edge("calls", END)
    return loop, node


class _Dbos:
    """DBOS Transact on one system database, with its write transactions counted."""

    def __init__(self, url: str) -> None:
        # Imported by name: DBOS and SQLAlchemy come with the `benchmark` extra only,
        # and the type checks run without it.
        sa: Any = importlib.import_module("sqlalchemy")
        DBOS: Any = importlib.import_module("dbos").DBOS

        self.dbos = DBOS
        DBOS(config={"name": "agentflow-bench", "system_database_url": url, "log_level": "WARNING"})
        DBOS.launch()
        dbos_instance: Any = importlib.import_module("dbos._dbos")._get_dbos_instance()

        self.commits = 0
        writing: dict[int, bool] = {}
        engine = dbos_instance._sys_db.engine

        def statement(conn: Any, cursor: Any, text: str, *rest: Any) -> None:
            if text.lstrip().upper().startswith(_WRITE_VERBS):
                writing[id(conn)] = True

        def commit(conn: Any) -> None:
            if writing.pop(id(conn), False):
                self.commits += 1

        sa.event.listen(engine, "before_cursor_execute", statement)
        sa.event.listen(engine, "commit", commit)
        sa.event.listen(engine, "rollback", lambda conn: writing.pop(id(conn), None))

        async def work(i: int) -> dict[str, Any]:
            return {"ok": i}

        step = DBOS.step()(work)

        async def workflow(n: int) -> int:
            for i in range(n):
                await step(i)
            return n

        self._workflow = DBOS.workflow()(workflow)

    async def run(self) -> None:
        set_workflow_id: Any = importlib.import_module("dbos").SetWorkflowID
        with set_workflow_id(uuid.uuid4().hex):
            await self._workflow(STEPS)

    def close(self) -> None:
        self.dbos.destroy(destroy_registry=True)


def _wal_file(path: Path) -> str:
    """A SQLite file already in WAL mode (the mode persists in the file)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return f"sqlite:///{path}"


async def _timed(run: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await run()
    return time.perf_counter() - start


async def _compare(database: str, ours_url: str, dbos_url: str, blocks: int) -> list[list[str]]:
    dbos = _Dbos(dbos_url)
    rows: list[list[str]] = []
    try:
        for idempotent in (True, False):
            loop, node = _graphs(idempotent)
            for shape, graph in (("20 steps", loop), ("1 node, 20 calls", node)):
                label = (database, shape, "idempotent" if idempotent else "at-most-once")
                rows.append(await _one(label, ours_url, dbos, graph, blocks))
    finally:
        dbos.close()
    return rows


async def _one(
    label: tuple[str, str, str], url: str, dbos: _Dbos, graph: Graph, blocks: int
) -> list[str]:
    counter: Counter[str] = Counter()
    async with open_store(url, namespace=f"bench-{uuid.uuid4().hex[:8]}") as store:
        _count_store_writes(store, counter)
        compiled: CompiledGraph = graph.compile(store)

        async def ours() -> None:
            await compiled.run({"i": 0})

        await ours()  # warm both: schema, pools, statements
        await dbos.run()
        ratios: list[float] = []
        ours_times: list[float] = []
        theirs_times: list[float] = []
        counter.clear()
        dbos.commits = 0
        for block in range(blocks):
            pair = [(ours, ours_times), (dbos.run, theirs_times)]
            if block % 2:
                pair.reverse()
            for run, times in pair:
                times.append(await _timed(run))
            ratios.append(theirs_times[-1] / ours_times[-1])
    steps = STEPS * blocks
    ours_commits = sum(counter.values()) / steps
    theirs_commits = dbos.commits / steps
    return [
        *label,
        f"{STEPS / statistics.median(ours_times):,.0f}",
        f"{STEPS / statistics.median(theirs_times):,.0f}",
        f"{statistics.median(ratios):.2f}x",
        f"{ours_commits:.2f}",
        f"{theirs_commits:.2f}",
    ]


async def run(quick: bool) -> list[Table]:
    blocks = 6 if quick else 40
    table = Table(
        f"Durable steps against DBOS Transact ({STEPS} calls per run, {blocks} interleaved runs)",
        [
            "database",
            "workload",
            "calls",
            "agentflow steps/s",
            "DBOS steps/s",
            "ratio (median of runs)",
            "agentflow commits/call",
            "DBOS commits/call",
        ],
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        ours = f"sqlite:///{root / 'agentflow.db'}"
        table.rows += await _compare("SQLite", ours, _wal_file(root / "dbos.db"), blocks)
    table.rows += await _compare("PostgreSQL", DSN, DBOS_PG, blocks)
    table.notes += [
        "SQLite: WAL, synchronous=FULL for both; PostgreSQL: synchronous_commit=on.",
        "commits/call: write transactions per journaled call (one call per step in the "
        "20-step workload), the run's claim and final commit included.",
        "idempotent: agentflow ctx.tool(idempotent=True) writes nothing before the call, "
        "as a DBOS step; at-most-once: its started entry is durable before the call.",
    ]
    return [table]
