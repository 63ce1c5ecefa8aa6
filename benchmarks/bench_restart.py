"""Restart to resumed: a process killed mid-run and started again under the same identity.

Each round starts a run in a process of its own whose second step never
ends, kills it there (SIGKILL), starts a new process under the same identity
and times, from that process's start, until the run's hanging step is
stored: for agentflow its checkpoint, for DBOS Transact the step's row in
``operation_outputs``. The two are interleaved round by round, on PostgreSQL
(``synchronous_commit=on``), in fresh processes (interpreter and imports
included in "from the process's start"; "from ready" starts once the store
is open or DBOS launched).

agentflow: the first process runs the graph under ``compile(worker_id=)``;
the second is a ``Worker(worker_id=)`` (what ``agentflow worker --worker-id``
runs), which takes back on its first pass the runs its identity held, ending
their leases (``claim_ttl`` 30 s, which a restart without an identity waits
out). DBOS: the same ``executor_id`` in both processes; ``DBOS.launch()``
recovers the executor's pending workflows through its internal queue.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from tempfile import TemporaryDirectory
from typing import Any

import asyncpg

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.runtime import END, START, Graph, NodeContext, Worker
from benchmarks.common import Table
from benchmarks.durable_backends import DSN, postgres_schema

IDENTITY = "bench-restart-1"
#: DBOS's system database for this benchmark alone (dropped and made again per run).
DBOS_PG = os.environ.get(
    "AGENTFLOW_DBOS_RESTART_URL",
    "postgresql://postgres@127.0.0.1:5432/agentflow_dbos_restart",
)
#: Seconds a round may take before it counts as failed (a bound, not a measure).
_DEADLINE = 60.0
#: agentflow restarted without an identity: its run waits for the lease (once, in full runs).
_ANONYMOUS = "agentflow, no worker_id"
_POLL = 0.002


@dataclass(frozen=True)
class Job:
    """One incarnation: which system, where, the run, and the hang marker file."""

    system: str
    schema: str
    run: str
    marker: str
    restarted: bool


def _hang_or_pass(marker: str) -> bool:
    """True in the first incarnation (it then hangs): the marker did not exist yet."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def restart_graph(marker: str) -> Graph:
    """first -> hang (forever, the first time) -> END."""

    async def first(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"first": True}

    async def hang(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        if _hang_or_pass(marker):
            await asyncio.sleep(3600)
        return {"resumed": True}

    graph = Graph("restart").add_node("first", first).add_node("hang", hang)
    return graph.add_edge(START, "first").add_edge("first", "hang").add_edge("hang", END)


async def _agentflow(job: Job, ready: Any) -> None:
    identity = None if job.system == _ANONYMOUS else IDENTITY
    async with PostgresCheckpointer(DSN, schema=job.schema) as store:
        graph = restart_graph(job.marker)
        await store.list_threads_page(limit=1)
        ready.put(time.monotonic())
        if not job.restarted:
            await graph.compile(store, worker_id=identity).run({}, thread=job.run)
            return
        worker = Worker([graph.compile(store)], worker_id=identity)
        while True:  # without an identity, the dead holder's run is stranded until its lease lapses
            await worker.run_once(recover=identity is None)
            await asyncio.sleep(0.05)


def _dbos(job: Job, ready: Any) -> None:
    # Imported by name: DBOS comes with the `benchmark` extra only.
    dbos: Any = importlib.import_module("dbos")
    DBOS = dbos.DBOS
    config = {"name": "agentflow-bench-restart", "system_database_url": DBOS_PG}
    config |= {"executor_id": IDENTITY, "application_version": "bench-1", "log_level": "WARNING"}
    DBOS(config=config)

    def first() -> bool:
        return True

    def hang() -> bool:
        if _hang_or_pass(job.marker):
            time.sleep(3600)
        return True

    steps: list[Any] = [DBOS.step()(first), DBOS.step()(hang)]

    def flow() -> None:
        for step in steps:
            step()

    workflow: Any = DBOS.workflow()(flow)
    DBOS.launch()
    ready.put(time.monotonic())
    if not job.restarted:
        with dbos.SetWorkflowID(job.run):
            workflow()
    time.sleep(3600)  # recovery runs on DBOS's threads


def incarnation(job: Job, ready: Any) -> None:
    """A spawned process: one incarnation of ``job``'s system."""
    if job.system != "DBOS":
        asyncio.run(_agentflow(job, ready))
    else:
        _dbos(job, ready)


async def _stored(job: Job) -> bool:
    """Whether the hanging step of ``job``'s run is stored."""
    conn = await asyncpg.connect(DBOS_PG if job.system == "DBOS" else DSN)
    try:
        if job.system != "DBOS":
            found = await conn.fetchval(
                f'SELECT max(step) FROM "{job.schema}".checkpoints WHERE thread = $1', job.run
            )
            return bool(found is not None and found >= 2)
        found = await conn.fetchval(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = $1"
            " AND function_name LIKE '%hang%'",
            job.run,
        )
        return bool(found)
    finally:
        await conn.close()


async def _until(job: Job, check: Any) -> float:
    deadline = time.monotonic() + _DEADLINE
    while time.monotonic() < deadline:
        if await check():
            return time.monotonic()
        await asyncio.sleep(_POLL)
    raise AssertionError(f"{job.system}: the run did not get there in {_DEADLINE} s")


async def _ready(queue: Any, process: Any) -> float:
    while True:
        try:
            value: float = await asyncio.to_thread(queue.get, timeout=1.0)
            return value
        except Empty:
            if process.exitcode is not None:
                raise RuntimeError(f"an incarnation exited with {process.exitcode}") from None


@dataclass
class Timing:
    from_start: float
    from_ready: float


async def _round(system: str, schema: str, scratch: Path) -> Timing:
    run = f"restart-{uuid.uuid4().hex[:12]}"
    marker = str(scratch / f"{run}.hung")
    context = multiprocessing.get_context("spawn")
    first = Job(system, schema, run, marker, restarted=False)
    ready = context.Queue()
    dying = context.Process(target=incarnation, args=(first, ready))
    dying.start()
    await _ready(ready, dying)
    await _until(first, lambda: asyncio.to_thread(os.path.exists, marker))  # it hangs now
    dying.kill()
    dying.join()
    again = Job(system, schema, run, marker, restarted=True)
    began = time.monotonic()
    restarted = context.Process(target=incarnation, args=(again, ready))
    restarted.start()
    try:
        opened = await _ready(ready, restarted)
        stored = await _until(again, lambda: _stored(again))
    finally:
        restarted.kill()
        restarted.join()
    return Timing(stored - began, stored - opened)


async def _reset_dbos() -> None:
    """A fresh DBOS system database, so earlier rounds' workflows are not recovered."""
    name = DBOS_PG.rsplit("/", 1)[1]
    admin = await asyncpg.connect(DSN)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run(quick: bool) -> list[Table]:
    rounds = 2 if quick else 6
    times: dict[str, list[Timing]] = {"agentflow": [], "DBOS": []}
    await _reset_dbos()
    with TemporaryDirectory(prefix="agentflow-bench-restart-") as folder:
        async with postgres_schema() as schema:
            for index in range(rounds):
                order = ["agentflow", "DBOS"] if index % 2 == 0 else ["DBOS", "agentflow"]
                for system in order:
                    times[system].append(await _round(system, schema, Path(folder)))
            if not quick:
                times[_ANONYMOUS] = [await _round(_ANONYMOUS, schema, Path(folder))]
    table = Table(
        f"Restart to resumed on PostgreSQL: a process killed mid-step, started again under "
        f"its identity (median of {rounds} interleaved rounds; without an identity: one)",
        ["system", "from the process's start", "from ready", "slowest from start"],
    )
    for system, timings in times.items():
        table.rows.append(
            [
                system,
                f"{statistics.median(t.from_start for t in timings) * 1000:,.0f} ms",
                f"{statistics.median(t.from_ready for t in timings) * 1000:,.0f} ms",
                f"{max(t.from_start for t in timings) * 1000:,.0f} ms",
            ]
        )
    table.notes += [
        "until the killed step is stored: agentflow's checkpoint of it, DBOS's "
        "operation_outputs row; polled every 2 ms",
        f"agentflow: compile(worker_id={IDENTITY!r}) then Worker(worker_id=...); lease 30 s, "
        "which a restart without an identity waits out; DBOS: the same executor_id",
        "from ready: from the store open (agentflow) or DBOS.launch() returning (DBOS)",
    ]
    return [table]
