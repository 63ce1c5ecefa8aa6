"""FileCheckpointer against the raw floor, and its due and status indexes at scale.

The first table: both contestants fsync the file and its directory on every
write (what "durable" means for a file). The floor is a synchronous loop of
temp + fsync + rename + fsync with no lock, no revision read and no event
loop: what any durable one-file-per-checkpoint store must pay. States are the
shared ~10 KB nested states.

The second table: ``list_due`` and a status page among many waiting threads,
against paging every thread as the timer worker used to (the passes of
:mod:`benchmarks.bench_due`). That store is filled on tmpfs when there is one:
the figures are of reads, and a fill fsyncing 200,000 puts to disk would take
most of an hour.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.file import FileCheckpointer
from benchmarks.bench_due import fill_waiting, list_due_pass, page_all_pass
from benchmarks.common import Table, median, ms, nested_state, percentile, rate, ratio, time_calls

_HEADERS = [
    "checkpointer",
    "puts/s (seq)",
    "get latest p50",
    "history (s)",
    "concurrent puts/s",
    "page of 100 threads p50",
]


def _durable_write(directory: str, name: str, data: bytes) -> None:
    temp = os.path.join(directory, f".{name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.replace(temp, os.path.join(directory, name))
    dfd = os.open(directory, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)


def _floor(root: Path, puts: int, gets: int, blobs: list[bytes]) -> list[float]:
    directory = root / "seq"
    directory.mkdir(parents=True)
    start = time.perf_counter()
    for step in range(puts):
        _durable_write(str(directory), f"{step:06d}.json", blobs[step])
    seq = puts / (time.perf_counter() - start)
    samples = []
    for _ in range(gets):
        begin = time.perf_counter()
        latest = max(os.listdir(directory))
        orjson.loads((directory / latest).read_bytes())
        samples.append(time.perf_counter() - begin)
    start = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        orjson.loads((directory / name).read_bytes())
    return [seq, percentile(samples, 50), time.perf_counter() - start]


async def _ours(root: Path, puts: int, gets: int, states: list[dict[str, Any]]) -> list[float]:
    async with FileCheckpointer(root) as cp:
        start = time.perf_counter()
        for step in range(puts):
            await cp.put(Checkpoint(thread="seq", step=step, state=states[step], next=("n",)))
        seq = puts / (time.perf_counter() - start)
        samples = await time_calls(lambda: cp.get("seq"), gets)
        start = time.perf_counter()
        count = sum([1 async for _ in cp.history("seq")])
        full = time.perf_counter() - start
        assert count == puts

        async def writer(w: int) -> None:
            for step in range(puts // 8):
                await cp.put(Checkpoint(thread=f"w{w}", step=step, state=states[step]))

        start = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(8)))
        concurrent = 8 * (puts // 8) / (time.perf_counter() - start)
        for thread in range(puts):
            await cp.put(Checkpoint(thread=f"list-{thread:05d}", step=0, state={"n": thread}))
        pages = await time_calls(lambda: cp.list_threads_page(limit=100), 20)
        return [seq, percentile(samples, 50), full, concurrent, percentile(pages, 50)]


#: Where the index table's store lives: tmpfs when the machine has one.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None


async def _indexes(quick: bool) -> Table:
    suspended, due, rounds = (10_000, 100, 3) if quick else (100_000, 1_000, 3)
    with tempfile.TemporaryDirectory(prefix="bench-file-due-", dir=_SCRATCH) as tmp:
        async with FileCheckpointer(tmp) as cp:
            start = time.perf_counter()
            await fill_waiting(cp, suspended, due)
            fill_s = time.perf_counter() - start
            due_times: list[float] = []
            scan_times: list[float] = []
            status_pages: list[float] = []
            for _ in range(rounds):  # interleaved, so load swings hit all three alike
                start = time.perf_counter()
                found, due_read = await list_due_pass(cp)
                due_times.append(time.perf_counter() - start)
                assert found == due, (found, due)
                start = time.perf_counter()
                found, scan_read = await page_all_pass(cp)
                scan_times.append(time.perf_counter() - start)
                assert found == due, (found, due)
                status_pages += await time_calls(
                    lambda: cp.list_threads_page(limit=100, status="waiting"), 5
                )
    return Table(
        title=f"File store indexes: {due:,} due timers among {suspended:,} waiting threads"
        + (" (quick)" if quick else ""),
        headers=[
            "threads waiting (timer + human)",
            "due",
            "list_due pass",
            "rows read",
            "page-all pass",
            "rows read",
            "speed-up",
            "status page of 100 p50",
            "fill time",
        ],
        rows=[
            [
                f"{suspended:,} + {suspended:,} human",
                f"{due:,}",
                f"{median(due_times) * 1000:.1f} ms",
                f"{due_read:,} ({due_read / due:.2f}x due)",
                f"{median(scan_times) * 1000:.0f} ms",
                f"{scan_read:,}",
                f"{median(scan_times) / median(due_times):.0f}x",
                ms(percentile(status_pages, 50)),
                f"{fill_s:.0f} s" + (" (tmpfs)" if _SCRATCH else ""),
            ]
        ],
        notes=[
            f"medians of {rounds} interleaved passes; list_due pages of 100, page-all pages "
            "of 1,000 (the worker's old scan); a status page lists 100 of the "
            f"{2 * suspended:,} threads' {suspended:,} waiting ones",
            "rows read = summaries returned to the caller, the peek row of each page included",
        ],
    )


async def run(quick: bool) -> list[Table]:
    puts = 200 if quick else 2_000
    gets = 100 if quick else 500
    states = [nested_state(step) for step in range(puts)]
    blobs = [orjson.dumps(state) for state in states]
    with tempfile.TemporaryDirectory(prefix="bench-file-") as tmp:
        ours = await _ours(Path(tmp, "agentflow"), puts, gets, states)
        floor = await asyncio.to_thread(_floor, Path(tmp, "raw"), puts, gets, blobs)
    rows = [
        [
            "agentflow FileCheckpointer",
            rate(int(ours[0]), 1.0),
            ms(ours[1]),
            f"{ours[2]:.3f}",
            rate(int(ours[3]), 1.0),
            ms(ours[4]),
        ],
        [
            "raw temp+fsync+rename floor (sync)",
            rate(int(floor[0]), 1.0),
            ms(floor[1]),
            f"{floor[2]:.3f}",
            "",
            "",
        ],
        [
            "agentflow vs floor",
            ratio(ours[0], floor[0]),
            ratio(floor[1], ours[1]),
            ratio(floor[2], ours[2]),
            "",
            "",
        ],
    ]
    return [
        Table(
            title=f"File store, fsync per write, ~{len(blobs[0]) // 1000} KB state"
            + (" (quick)" if quick else ""),
            headers=_HEADERS,
            rows=rows,
            notes=[
                f"{puts:,} sequential puts on one thread; history reads all of them; "
                f"8 tasks x {puts // 8} puts on their own threads; a page lists 100 of "
                f"{puts:,} threads.",
                "Ratios above 1.00x favour agentflow.",
            ],
        ),
        await _indexes(quick),
    ]
