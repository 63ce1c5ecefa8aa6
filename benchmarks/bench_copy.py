"""``agentflow copy`` SQLite -> PostgreSQL against raw asyncpg floors.

The source is one SQLite store of 10,000 threads x 20 steps (``--quick``: 300
threads) with ~1 KB agent-like states. Each contestant copies all of it into
tables of its own in a schema created for the round and dropped after:

- ``agentflow copy``: :class:`~agentflow.cli.copy.StoreCopy` (what the command
  runs) through the public protocol only, 16 threads at a time: one history
  stream per thread read, one conditional ``put`` per checkpoint written, then
  every thread read back from PostgreSQL to check its count, latest step and
  revision (timed apart as "verify");
- the row floor: the same payload bytes read straight from the SQLite file and
  written with one asyncpg ``INSERT`` round trip per checkpoint over 10 pooled
  connections (as many as PostgresCheckpointer's pool), the shape of a put
  without any checks;
- the bulk floor: the same rows with ``COPY`` in batches of 5,000, what a bulk
  import method on the protocol could reach.

Contestants run in interleaved rounds (one after the other, ``ROUNDS`` times,
median) so that load from other jobs on the shared box hits all alike.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.cli.copy import StoreCopy
from benchmarks.bench_postgres import DSN, _admin
from benchmarks.common import Table, nested_state, rate, ratio

STEPS = 20
#: Threads copied at once by agentflow copy (more than its pool's connections,
#: so the pool stays busy while other threads are being read).
CONCURRENCY = 16
#: Connections of the row floor: as many as PostgresCheckpointer's pool holds.
FLOOR_CONNECTIONS = 10
BATCH = 5_000
_ROWS = "SELECT thread, step, revision, payload FROM agentflow_checkpoints ORDER BY thread, step"


async def _seed(path: Path, threads: int) -> None:
    """``threads`` x STEPS checkpoints, written many threads at once (group commit)."""
    states = [nested_state(step, size=1_000) for step in range(STEPS)]
    async with SqliteCheckpointer(path, synchronous="NORMAL") as store:

        async def one(i: int) -> None:
            for step in range(STEPS):
                cp = Checkpoint(thread=f"thread-{i:06}", step=step, state=states[step], next=("n",))
                await store.put(cp, if_revision=0)

        for start in range(0, threads, 256):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 256, threads))))


def _sqlite_rows(path: Path) -> Iterator[list[tuple[str, int, int, bytes]]]:
    """The source's rows in batches, read with the standard driver."""
    conn = sqlite3.connect(path)
    try:
        cursor = conn.execute(_ROWS)
        while batch := cursor.fetchmany(BATCH):
            yield batch
    finally:
        conn.close()


_RAW_TABLE = (
    'CREATE TABLE {t} (namespace TEXT COLLATE "C", thread TEXT COLLATE "C", step BIGINT, '
    "revision BIGINT, payload BYTEA COMPRESSION lz4, PRIMARY KEY (namespace, thread, step))"
)


async def _copy_agentflow(source: Path, schema: str) -> dict[str, float]:
    async with (
        SqliteCheckpointer(source) as src,
        PostgresCheckpointer(DSN, table="copy", schema=schema) as dst,
    ):
        copier = StoreCopy(src, dst, concurrency=CONCURRENCY)
        started = time.perf_counter()
        await copier.copy()
        copied = time.perf_counter()
        await copier.verify()
        verified = time.perf_counter()
    report = copier.report
    assert not report.mismatched and report.checkpoints == report.writes
    return {"copy": copied - started, "verify": verified - copied, "rows": report.checkpoints}


async def _copy_rows(source: Path, schema: str) -> dict[str, float]:
    table = f'"{schema}"."raw"'
    await _admin(_RAW_TABLE.format(t=table))
    insert = f"INSERT INTO {table} VALUES ('', $1, $2, $3, $4)"
    pool = await asyncpg.create_pool(DSN, min_size=FLOOR_CONNECTIONS, max_size=FLOOR_CONNECTIONS)
    rows = 0
    try:
        started = time.perf_counter()
        for batch in _sqlite_rows(source):
            queue = iter(batch)

            async def writer(pending: Iterator[tuple[str, int, int, bytes]]) -> None:
                async with pool.acquire() as conn:
                    for row in pending:
                        await conn.execute(insert, *row)

            await asyncio.gather(*(writer(queue) for _ in range(FLOOR_CONNECTIONS)))
            rows += len(batch)
        elapsed = time.perf_counter() - started
    finally:
        await pool.close()
    return {"copy": elapsed, "verify": 0.0, "rows": rows}


async def _copy_bulk(source: Path, schema: str) -> dict[str, float]:
    await _admin(_RAW_TABLE.format(t=f'"{schema}"."raw"'))
    conn = await asyncpg.connect(DSN)
    rows = 0
    try:
        started = time.perf_counter()
        for batch in _sqlite_rows(source):
            await conn.copy_records_to_table(
                "raw", schema_name=schema, records=[("", *row) for row in batch]
            )
            rows += len(batch)
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    return {"copy": elapsed, "verify": 0.0, "rows": rows}


_CONTESTANTS: list[tuple[str, Callable[[Path, str], Awaitable[dict[str, float]]]]] = [
    (f"agentflow copy (protocol, {CONCURRENCY} threads at once)", _copy_agentflow),
    (f"raw floor: 1 INSERT per checkpoint, {FLOOR_CONNECTIONS} connections", _copy_rows),
    (f"raw floor: COPY in batches of {BATCH:,}", _copy_bulk),
]


async def _round(
    source: Path, run: Callable[[Path, str], Awaitable[dict[str, float]]]
) -> dict[str, float]:
    schema = f"bench_copy_{uuid.uuid4().hex[:8]}"
    await _admin(f'CREATE SCHEMA "{schema}"')
    try:
        return await run(source, schema)
    finally:
        await _admin(f'DROP SCHEMA "{schema}" CASCADE')


async def run(quick: bool) -> list[Table]:
    threads = 300 if quick else 10_000
    rounds = 3 if quick else 1
    with tempfile.TemporaryDirectory(prefix="bench-copy-") as scratch:
        source = Path(scratch) / "source.db"
        seeded = time.perf_counter()
        await _seed(source, threads)
        seed_s = time.perf_counter() - seeded
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in _CONTESTANTS}
        for _ in range(rounds):
            for name, contestant in _CONTESTANTS:
                results[name].append(await _round(source, contestant))
    return [_table(results, threads, rounds, seed_s)]


def _median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(sample[key] for sample in samples)


def _table(
    results: dict[str, list[dict[str, Any]]], threads: int, rounds: int, seed_s: float
) -> Table:
    rows_total = threads * STEPS
    floor = _median(results[_CONTESTANTS[1][0]], "copy")
    table = Table(
        f"copy {threads:,} threads x {STEPS} steps ({rows_total:,} checkpoints of ~1 KB), "
        "SQLite -> PostgreSQL",
        ["contestant", "copy (s)", "checkpoints/s", "verify (s)", "vs row floor"],
    )
    for name, samples in results.items():
        copy_s, verify_s = _median(samples, "copy"), _median(samples, "verify")
        table.rows.append(
            [
                name,
                f"{copy_s:.1f}",
                rate(rows_total, copy_s),
                f"{verify_s:.1f}" if verify_s else "-",
                ratio(copy_s, floor),
            ]
        )
    table.notes.append(
        f"median of {rounds} interleaved round(s); seeding the source took {seed_s:.0f} s; "
        "the box has 2 vCPUs shared with other jobs, so figures are noisy"
    )
    table.notes.append(
        "agentflow copy keeps every revision (one put per revision; all are 1 here) and "
        "refuses or continues threads already at the destination; the floors only insert"
    )
    return table
