"""1,000 runs x 10 journaled calls on PostgreSQL, driven by 4 worker processes.

Every run waits on a timer that is due at once; then 4 spawned processes,
each a :class:`~agentflow.runtime.Worker` scanning the same store with
``recover=True``, race for them: the store's claims decide who runs each
one. Each run then makes 10 ``ctx.tool`` calls, and each call inserts a row
``(run, call)`` into a ledger table that has no unique constraint, so a call
made twice would show as two rows. After the workers exit, the ledger and
the checkpoints are read back: duplicates and lost runs must both be 0.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.synchronize import Event
from queue import Empty
from typing import Any

import asyncpg

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.runtime import START, CompiledGraph, Graph, NodeContext, ToolCall, Worker
from agentflow.runtime.calls import ToolFn
from benchmarks.common import Table
from benchmarks.durable_backends import DSN, postgres_schema

CALLS = 10
WORKERS = 4
#: Runs the parent creates at once.
_CREATING = 16
#: Seconds a worker pass with nothing to do waits before it looks again.
_IDLE = 0.05


def ledger_graph(charge: ToolFn) -> Graph:
    """Wait for a due timer, then make ``CALLS`` journaled calls of ``charge``."""

    async def work(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ctx.wait(timedelta(0))
        for call in range(state["calls"]):
            await ctx.tool("charge", {"run": ctx.thread, "call": call}, charge)
        return {"charged": state["calls"]}

    return Graph("ledger").add_node("work", work).add_edge(START, "work")


def _compile(schema: str, charge: ToolFn) -> tuple[CompiledGraph, PostgresCheckpointer]:
    store = PostgresCheckpointer(DSN, schema=schema)
    return ledger_graph(charge).compile(store), store


@dataclass
class WorkerReport:
    """What one worker process did."""

    pid: int
    resumed: int = 0
    taken: int = 0
    failed: list[str] = field(default_factory=list)
    passes: int = 0


async def _work(schema: str, ready: Any, start: Event) -> WorkerReport:
    report = WorkerReport(os.getpid())
    pool = await asyncpg.create_pool(DSN, min_size=1, max_size=4)

    async def charge(call: ToolCall) -> dict[str, bool]:
        arguments = call.arguments
        await pool.execute(
            f'INSERT INTO "{schema}".ledger (run, call, pid) VALUES ($1, $2, $3)',
            arguments["run"],
            arguments["call"],
            report.pid,
        )
        return {"charged": True}

    graph, store = _compile(schema, charge)
    try:
        async with store:
            worker = Worker([graph])
            await store.list_threads(limit=1)  # connect before the clock starts
            ready.put(report.pid)
            start.wait()
            while True:
                outcome = await worker.run_once(recover=True)
                report.passes += 1
                report.resumed += len(outcome.resumed)
                report.taken += len(outcome.taken)
                report.failed.extend(f"{thread}: {error}" for thread, error in outcome.failed)
                if not outcome.resumed and not outcome.taken:
                    return report  # nothing due, stranded or held by another worker
                if not outcome.resumed:
                    await asyncio.sleep(_IDLE)
    finally:
        await pool.close()


def worker_main(schema: str, ready: Any, start: Event, reports: Any) -> None:
    """A spawned worker process: say it is ready, then resume due runs until none is left."""
    reports.put(asyncio.run(_work(schema, ready, start)))


async def _create(schema: str, runs: int) -> None:
    async def never(call: ToolCall) -> None:
        raise AssertionError("a run makes no call before its timer is due")

    graph, store = _compile(schema, never)
    async with store:
        slots = asyncio.Semaphore(_CREATING)

        async def create(index: int) -> None:
            async with slots:
                result = await graph.run({"calls": CALLS}, thread=_thread(index))
                assert result.state.get("charged") is None

        await asyncio.gather(*(create(i) for i in range(runs)))


def _thread(index: int) -> str:
    return f"run-{index:05}"


@dataclass
class Audit:
    """What the ledger and the checkpoints say after the workers exit."""

    rows: int
    duplicates: int
    missing_calls: int
    lost_runs: int
    #: Seconds from the first ledger insert to the last.
    span: float


async def _audit(schema: str, runs: int) -> Audit:
    conn = await asyncpg.connect(DSN)
    try:
        rows = await conn.fetchval(f'SELECT count(*) FROM "{schema}".ledger')
        duplicates = await conn.fetchval(
            f'SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM "{schema}".ledger'
            " GROUP BY run, call HAVING count(*) > 1) AS repeated"
        )
        span = await conn.fetchval(
            f'SELECT extract(epoch FROM max(at) - min(at)) FROM "{schema}".ledger'
        )
        distinct = await conn.fetchval(
            f'SELECT count(*) FROM (SELECT DISTINCT run, call FROM "{schema}".ledger) AS calls'
        )
    finally:
        await conn.close()
    async with PostgresCheckpointer(DSN, schema=schema) as checkpointer:
        lost = 0
        for index in range(runs):
            latest = await checkpointer.get(_thread(index))
            if latest is None or not latest.done or latest.state.get("charged") != CALLS:
                lost += 1
    return Audit(rows, int(duplicates), runs * CALLS - distinct, lost, float(span or 0))


async def ledger_table(quick: bool) -> Table:
    runs = 100 if quick else 1_000
    async with postgres_schema() as schema:
        await _admin_ledger(schema)
        created = time.perf_counter()
        await _create(schema, runs)
        created = time.perf_counter() - created
        context = multiprocessing.get_context("spawn")
        ready, start, reports = context.Queue(), context.Event(), context.Queue()
        processes = [
            context.Process(target=worker_main, args=(schema, ready, start, reports))
            for _ in range(WORKERS)
        ]
        for process in processes:
            process.start()
        for _ in processes:
            await _receive(ready, processes)
        began = time.perf_counter()
        start.set()
        done: list[WorkerReport] = [await _receive(reports, processes) for _ in processes]
        wall = time.perf_counter() - began
        for process in processes:
            process.join()
        audit = await _audit(schema, runs)
    return _table(runs, created, wall, done, audit)


async def _receive(queue: Any, processes: list[Any]) -> Any:
    """The next message from a worker; raises if a worker died without sending it."""
    while True:
        try:
            return await asyncio.to_thread(queue.get, timeout=1.0)
        except Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a worker process exited with {dead[0]}") from None


async def _admin_ledger(schema: str) -> None:
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(
            f'CREATE TABLE "{schema}".ledger (run text NOT NULL, call int NOT NULL,'
            " pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
    finally:
        await conn.close()


def _table(
    runs: int, created: float, wall: float, reports: list[WorkerReport], audit: Audit
) -> Table:
    calls = runs * CALLS
    failed = [line for report in reports for line in report.failed]
    share = ", ".join(str(report.resumed) for report in sorted(reports, key=lambda r: r.pid))
    table = Table(
        f"{runs:,} concurrent runs x {CALLS} journaled calls on PostgreSQL, "
        f"{WORKERS} worker processes",
        ["measure", "value"],
        [
            ["wall time (workers start to last exit)", f"{wall:.2f} s"],
            ["throughput, journaled calls", f"{calls / wall:,.0f} calls/s"],
            ["throughput, runs", f"{runs / wall:,.1f} runs/s"],
            ["first to last ledger insert", f"{audit.span:.2f} s"],
            ["runs resumed per worker", share],
            ["claims lost to another worker", f"{sum(r.taken for r in reports):,}"],
            ["ledger rows", f"{audit.rows:,} (expected {calls:,})"],
            ["duplicate calls in the ledger", f"{audit.duplicates}"],
            ["calls missing from the ledger", f"{audit.missing_calls}"],
            ["lost runs (not done with all calls)", f"{audit.lost_runs}"],
            ["runs that failed in a worker", f"{len(failed)}"],
        ],
        [
            f"each worker process is a Worker(concurrency=4) looping run_once(recover=True); "
            f"creating the {runs:,} waiting runs beforehand took {created:.1f} s",
            "the ledger table has no unique constraint: a call made twice is two rows",
            "synchronous_commit=on; every journal write, put and ledger insert is a commit",
        ],
    )
    if failed:
        table.notes.append("first failure: " + failed[0])
    if audit.duplicates or audit.lost_runs or audit.missing_calls or failed:
        raise AssertionError(table.markdown())
    return table
