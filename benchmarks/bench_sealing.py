"""What integrity and sealing cost: memory, SQLite and PostgreSQL, ~10 KB states, interleaved.

Three subjects per backend, each on its own store: *no envelope* (the
integrity envelope switched off for its blocks only, the baseline that the
always-on check is measured against), *integrity* (the default) and *sealed*
(``SealedCodec``, AES-256-GCM). The subjects take turns call by call (one
put of each, then the next; the order rotating per round), and each round
ends with one full history read of each, so load from other processes on the
machine hits all three alike; p50s pool every round's samples.

A first table times the CPU work alone (encode, envelope, seal, and back) on
one record, which resolves differences far below the noise of a round trip.
The last tables do the same for durable runs (``agentflow.durable``): a
``progress`` write and a ``load`` of one claimed run with a ~10 KB state, the
default integrity envelope against sealed parts, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import timeit
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from agentflow.checkpoint import MemoryCheckpointer, integrity
from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.sealing import KeyRing, SealedCodec, new_key
from agentflow.checkpoint.sealing.codec import checkpoint_context
from agentflow.checkpoint.sealing.sealer import Sealer
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.durable import ClaimMode, DurableStore
from agentflow.durable.testing.harness import make_record
from benchmarks.common import Table, median, ms, nested_state

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
_RING = KeyRing.from_source(lambda: {"current": "bench", "keys": {"bench": new_key()}})
_BARE, _INTEGRITY, _SEALED = "no envelope", "integrity (default)", "sealed (AES-256-GCM)"
_ENVELOPE = {"wrap": integrity.wrap, "unwrap": integrity.unwrap}
_NO_ENVELOPE = {"wrap": lambda key, payload: payload, "unwrap": lambda key, stored: stored}


@dataclass
class _Sizes:
    rounds: int
    puts: int
    gets: int
    history: int

    @classmethod
    def of(cls, quick: bool) -> _Sizes:
        return cls(3, 40, 40, 300) if quick else cls(20, 100, 150, 2_000)


@dataclass
class _Subject:
    name: str
    cp: Checkpointer
    puts: list[float] = field(default_factory=list)
    gets: list[float] = field(default_factory=list)
    histories: list[float] = field(default_factory=list)

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """The subject's blocks; the baseline's run with the envelope taken out."""
        if self.name != _BARE:
            yield
            return
        vars(integrity).update(_NO_ENVELOPE)
        try:
            yield
        finally:
            vars(integrity).update(_ENVELOPE)


async def _round(subjects: list[_Subject], number: int, sizes: _Sizes, states: list[Any]) -> None:
    thread = f"round-{number}"
    for step in range(sizes.puts):
        cp_step = Checkpoint(thread=thread, step=step, state=states[step % len(states)])
        for subject in subjects:
            with subject.turn():
                start = time.perf_counter()
                await subject.cp.put(cp_step)
                subject.puts.append(time.perf_counter() - start)
    for _ in range(sizes.gets):
        for subject in subjects:
            with subject.turn():
                start = time.perf_counter()
                await subject.cp.get(thread)
                subject.gets.append(time.perf_counter() - start)
    for subject in subjects:
        with subject.turn():
            start = time.perf_counter()
            count = sum([1 async for _ in subject.cp.history("history")])
            subject.histories.append(time.perf_counter() - start)
        assert count == sizes.history


async def _compare(title: str, subjects: list[_Subject], sizes: _Sizes) -> Table:
    states = [nested_state(step) for step in range(16)]
    for subject in subjects:
        with subject.turn():
            for step in range(sizes.history):
                state = states[step % len(states)]
                await subject.cp.put(Checkpoint(thread="history", step=step, state=state))
    for number in range(sizes.rounds):
        shift = number % len(subjects)
        await _round(subjects[shift:] + subjects[:shift], number, sizes, states)
    bare, plain = subjects[0], subjects[1]
    table = Table(
        title,
        [
            "subject",
            "put p50",
            "get latest p50",
            f"history of {sizes.history:,}: median / best (s)",
            "compared with",
            "put",
            "get",
            "history",
        ],
    )
    for subject in subjects:
        history, best = median(subject.histories), min(subject.histories)
        row = [subject.name, ms(median(subject.puts)), ms(median(subject.gets))]
        row.append(f"{history:.3f} / {best:.3f}")
        if subject is bare:
            row += ["", "", "", ""]
        else:
            base = bare if subject is plain else plain
            row += [
                base.name,
                _paired(subject.puts, base.puts),
                _paired(subject.gets, base.gets),
                _paired(subject.histories, base.histories),
            ]
        table.rows.append(row)
    table.notes += [
        f"{sizes.rounds} rounds of {sizes.puts} sequential puts and {sizes.gets} get-latest "
        f"reads per subject, taking turns call by call (p50 of all); history: {sizes.rounds} "
        "full reads per subject, one per round.",
        "put / get / history: the median of the ratios of calls made next to each other "
        "(the n-th call of the subject against the n-th of the one it is compared with), "
        "which cancels the load drifting over the run.",
    ]
    return table


def _paired(samples: list[float], base: list[float]) -> str:
    ratio = median([a / b for a, b in zip(samples, base, strict=True)])
    return f"{(ratio - 1) * 100:+.1f}%"


@contextlib.asynccontextmanager
async def _memory_subjects() -> AsyncIterator[list[_Subject]]:
    codecs = ((_BARE, None), (_INTEGRITY, None), (_SEALED, SealedCodec(_RING)))
    yield [_Subject(name, MemoryCheckpointer(codec=codec)) for name, codec in codecs]


@contextlib.asynccontextmanager
async def _sqlite_subjects() -> AsyncIterator[list[_Subject]]:
    with tempfile.TemporaryDirectory(prefix="bench-sealing-") as root:
        async with contextlib.AsyncExitStack() as stack:
            made: list[_Subject] = []
            for name, codec in ((_BARE, None), (_INTEGRITY, None), (_SEALED, SealedCodec(_RING))):
                path = os.path.join(root, f"{len(made)}.db")
                cp = await stack.enter_async_context(SqliteCheckpointer(path, codec=codec))
                made.append(_Subject(name, cp))
            yield made


@contextlib.asynccontextmanager
async def _postgres_subjects() -> AsyncIterator[list[_Subject]]:
    from agentflow.checkpoint.postgres import PostgresCheckpointer

    tables = [f"bench_sealing_{uuid.uuid4().hex[:12]}_{i}" for i in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        made: list[_Subject] = []
        for table, (name, codec) in zip(
            tables, ((_BARE, None), (_INTEGRITY, None), (_SEALED, SealedCodec(_RING))), strict=True
        ):
            cp = PostgresCheckpointer(DSN, table=table, codec=codec)
            made.append(_Subject(name, await stack.enter_async_context(cp)))
        try:
            yield made
        finally:
            await _drop(tables)


async def _drop(tables: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(DSN)
    try:
        for table in tables:
            suffixes = ("_durable_journal", "_durable_bodies", "_durable_runs", "_durable_events")
            names = ", ".join(
                f'"{table}{suffix}"' for suffix in (*suffixes, "", "_threads", "_meta")
            )
            await conn.execute(f"DROP TABLE IF EXISTS {names}")
    finally:
        await conn.close()


def _cpu_table() -> Table:
    """Per-record CPU costs, each the best of interleaved repeats."""
    key = RecordKey("acme", "run-1", 7, b"\x01" * 16)
    cp = Checkpoint(thread="run-1", step=7, state=nested_state(7), ts="2026-12-01T10:00:00Z")
    json, sealer = JsonCodec(), Sealer(_RING)
    encoded = json.encode(cp, key)
    wrapped = integrity.wrap(key, encoded)
    sealed = sealer.seal(encoded, checkpoint_context(key))
    work = {
        "JSON encode": lambda: json.encode(cp, key),
        "integrity wrap (XXH3-64)": lambda: integrity.wrap(key, encoded),
        "seal (AES-256-GCM, nonce)": lambda: sealer.seal(encoded, checkpoint_context(key)),
        "JSON decode": lambda: json.decode(encoded, key, 1),
        "integrity unwrap": lambda: integrity.unwrap(key, wrapped),
        "open (AES-256-GCM)": lambda: sealer.open(sealed, checkpoint_context(key), "bench"),
    }
    best: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(7):
        for name, fn in work.items():
            best[name].append(timeit.timeit(fn, number=2_000) / 2_000)
    table = Table(
        f"CPU per record ({len(encoded):,}-byte JSON payload)", ["work", "best", "median"]
    )
    for name, samples in best.items():
        table.rows.append(
            [name, f"{min(samples) * 1e6:.2f} µs", f"{statistics.median(samples) * 1e6:.2f} µs"]
        )
    table.notes.append("7 interleaved repeats of 2,000 calls each; best and median per call.")
    return table


_DURABLE_CHECKED, _DURABLE_SEALED = "integrity (default)", "sealed parts (AES-256-GCM)"
_TOKEN = "bench#1"


async def _durable_compare(title: str, stores: list[DurableStore], sizes: _Sizes) -> Table:
    """``progress`` writes and ``load`` reads of one claimed run per store, taking turns."""
    names = (_DURABLE_CHECKED, _DURABLE_SEALED)
    states = [nested_state(step) for step in range(16)]
    records = []
    for store in stores:
        await store.create(make_record("bench", shared_state=states[0]))
        records.append(
            await store.claim(
                "bench",
                cycle_index=1,
                claim_token=_TOKEN,
                lease_ms=3_600_000,
                mode=ClaimMode.CONTINUE,
            )
        )
    writes: list[list[float]] = [[] for _ in stores]
    loads: list[list[float]] = [[] for _ in stores]
    for number in range(sizes.rounds):
        order = [(number + i) % len(stores) for i in range(len(stores))]
        for step in range(sizes.puts):
            for i in order:
                changed = replace(records[i], shared_state=states[step % len(states)])
                start = time.perf_counter()
                records[i] = await stores[i].progress(changed, claim_token=_TOKEN)
                writes[i].append(time.perf_counter() - start)
        for _ in range(sizes.gets):
            for i in order:
                start = time.perf_counter()
                await stores[i].load("bench")
                loads[i].append(time.perf_counter() - start)
    table = Table(title, ["subject", "progress p50", "load p50", "progress", "load"])
    for i, name in enumerate(names):
        row = [name, ms(median(writes[i])), ms(median(loads[i]))]
        row += ["", ""] if i == 0 else [_paired(writes[i], writes[0]), _paired(loads[i], loads[0])]
        table.rows.append(row)
    table.notes.append(
        f"{sizes.rounds} rounds of {sizes.puts} progress writes (the body rewritten) and "
        f"{sizes.gets} loads per subject, taking turns call by call; progress / load: the "
        "median of paired ratios against the default."
    )
    return table


@contextlib.asynccontextmanager
async def _durable_sqlite() -> AsyncIterator[list[DurableStore]]:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

    with tempfile.TemporaryDirectory(prefix="bench-sealing-") as root:
        async with contextlib.AsyncExitStack() as stack:
            yield [
                await stack.enter_async_context(
                    SqliteCheckpointer(os.path.join(root, f"{i}.db"), sealing=sealing)
                )
                for i, sealing in enumerate((None, _RING))
            ]


@contextlib.asynccontextmanager
async def _durable_postgres() -> AsyncIterator[list[DurableStore]]:
    from agentflow.checkpoint.postgres import PostgresCheckpointer

    tables = [f"bench_sealing_{uuid.uuid4().hex[:12]}_{i}" for i in range(2)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            yield [
                await stack.enter_async_context(
                    PostgresCheckpointer(DSN, table=table, sealing=sealing)
                )
                for table, sealing in zip(tables, (None, _RING), strict=True)
            ]
    finally:
        await _drop(tables)


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes.of(quick)
    tables = [_cpu_table()]
    async with _memory_subjects() as subjects:
        title = "Integrity and sealing in memory (no I/O: the CPU-bound worst case)"
        tables.append(await _compare(title, subjects, sizes))
    async with _sqlite_subjects() as subjects:
        tables.append(await _compare("Integrity and sealing on SQLite", subjects, sizes))
    try:
        async with _postgres_subjects() as subjects:
            tables.append(await _compare("Integrity and sealing on PostgreSQL", subjects, sizes))
    except (OSError, ImportError) as exc:
        tables.append(Table("Integrity and sealing on PostgreSQL", ["skipped"], [[str(exc)]]))
    async with _durable_sqlite() as stores:
        tables.append(await _durable_compare("Durable runs on SQLite", stores, sizes))
    async with _durable_postgres() as stores:
        tables.append(await _durable_compare("Durable runs on PostgreSQL", stores, sizes))
    return tables
