"""What the n-th journaled call of one node costs: the same at call 10,000 as at call 1.

One node makes 10,000 ``ctx.tool`` calls (not idempotent, so each writes its
``started`` entry with the previous call's receipt before it goes out) in
one step, so every call lands in one cycle and the journal grows to 10,000
entries. Per-call CPU is the process's CPU time (every thread: SQLite's
writer too) between successive calls, averaged over the 100 calls up to
call 1, 1,000 and 10,000; the ratio is the last over the first (the target:
within 1.5x). Memory is a second run under ``tracemalloc``: bytes still held
per call over the first 1,000 calls and over the last 1,000, so growth per
call stays bounded (an entry and its step's record of the call) instead of
growing with the journal. The backends run one after the other in one process.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable, Mapping
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext, ToolCall
from benchmarks.common import Table
from benchmarks.durable_backends import STORES

#: The backends measured (the in-process reference and the default file store).
BACKENDS = ("memory", "SQLite")
#: Calls averaged at each mark.
WINDOW = 100
#: The ratio the issue sets between the last mark and the first.
TARGET = 1.5


def _graph(tick: Callable[[], None]) -> Graph:
    def tool(call: ToolCall) -> dict[str, int]:
        tick()
        return {"n": 1}

    async def node(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        for i in range(state["calls"]):
            await ctx.tool("charge", {"i": i}, tool)
        tick()
        return {"done": True}

    return Graph("journal").add_node("calls", node).add_edge(START, "calls").add_edge("calls", END)


async def _run(backend: str, calls: int, clock: Callable[[], float]) -> list[float]:
    """The ``clock`` reading at each call and once after the last."""
    marks: list[float] = []
    async with STORES[backend]() as store:
        compiled = _graph(lambda: marks.append(clock())).compile(store)
        await compiled.run({"calls": 10}, thread="warm-up")  # a run of its own, not counted
        marks.clear()
        await compiled.run({"calls": calls}, thread=f"{backend}-calls")
    return marks[: calls + 1]


def _per_call(marks: list[float], at: int) -> float:
    """Mean seconds of the ``WINDOW`` calls ending at call ``at`` (1-based)."""
    end = max(at, WINDOW)
    return (marks[end] - marks[end - WINDOW]) / WINDOW


async def _held(backend: str, calls: int) -> tuple[float, float]:
    """Bytes held per call over the first and the last thousand calls (tracemalloc)."""
    span = min(1_000, calls // 2)
    tracemalloc.start()
    try:
        marks = await _run(backend, calls, lambda: float(tracemalloc.get_traced_memory()[0]))
    finally:
        tracemalloc.stop()
    return (marks[span] - marks[0]) / span, (marks[calls] - marks[calls - span]) / span


async def run(quick: bool) -> list[Table]:
    calls = 2_000 if quick else 10_000
    marks_at = [1, 1_000, calls]
    table = Table(
        f"One node making {calls:,} journaled calls: CPU per call at call n",
        [
            "backend",
            *(f"call {n:,} (us)" for n in marks_at),
            f"{calls:,} / 1",
            "bytes held per call, first 1,000",
            "last 1,000",
            "wall (s)",
        ],
    )
    misses = []
    for backend in BACKENDS:
        gc.collect()
        start = time.perf_counter()
        cpu = await _run(backend, calls, time.process_time)
        wall = time.perf_counter() - start
        at = [_per_call(cpu, n) for n in marks_at]
        ratio = at[-1] / at[0]
        first, last = await _held(backend, calls)
        if ratio > TARGET:
            misses.append(backend)
        table.rows.append(
            [
                backend,
                *(f"{seconds * 1e6:.0f}" for seconds in at),
                f"{ratio:.2f}x",
                f"{first:,.0f}",
                f"{last:,.0f}",
                f"{wall:.1f}",
            ]
        )
    table.notes.append(
        f"per-call CPU: process CPU (all threads) between calls, mean of the {WINDOW} calls up "
        f"to call n; target: call {calls:,} within {TARGET}x of call 1"
        + (f"; missed on {', '.join(misses)}" if misses else "")
    )
    table.notes.append(
        "bytes held per call: tracemalloc's current size at each call, a separate run; "
        "what a call leaves (its journal entry, the step's record of it) and nothing that "
        "grows with the journal"
    )
    return [table]
