"""The runtime's cost per step, and a step loop against LangGraph, on SQLite.

Three timings of one shape, a no-op loop of N steps on a fresh file at equal
durability (WAL + synchronous=FULL):

- *bare put*: N sequential ``SqliteCheckpointer.put`` of the checkpoint a step
  would write, with no runtime at all: the floor;
- *agentflow runtime*: a one-node graph looping N times (``run`` writes step 0
  plus one checkpoint per step);
- *LangGraph*: the same loop as a ``StateGraph`` on ``AsyncSqliteSaver`` with
  ``durability="sync"``, so each step's checkpoint is on disk before the next
  step starts, as ours is.

Each is the median of five interleaved runs. Two more rows run the same loop
on in-memory stores: the CPU cost of each runtime without the disk.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.timestamps import utc_now_iso
from agentflow.runtime import END, START, Graph, NodeContext
from benchmarks.common import Table, ratio

REPEATS = 5


async def _bare_puts(path: Path, steps: int) -> float:
    async with SqliteCheckpointer(path, synchronous="FULL") as store:
        await store.list_threads(limit=1)
        start = time.perf_counter()
        for i in range(steps + 1):
            await store.put(
                Checkpoint(
                    thread="bare",
                    step=i,
                    state={"i": i, "n": steps},
                    next=("tick",),
                    parent=f"bare:{i - 1}" if i else None,
                    ts=utc_now_iso(),
                    extra={"runtime": {"graph": "loop"}},
                ),
                if_revision=0,
            )
        return time.perf_counter() - start


async def _tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"i": state["i"] + 1}


def _again(state: Mapping[str, Any]) -> str:
    return "tick" if state["i"] < state["n"] else END


async def _runtime_loop(path: Path, steps: int) -> float:
    graph = Graph("loop").add_node("tick", _tick).add_edge(START, "tick")
    graph.add_conditional_edges("tick", _again, ["tick", END])
    async with SqliteCheckpointer(path, synchronous="FULL") as store:
        await store.list_threads(limit=1)
        compiled = graph.compile(store, step_limit=steps + 1)
        start = time.perf_counter()
        result = await compiled.run({"i": 0, "n": steps}, thread="loop")
        elapsed = time.perf_counter() - start
    assert result.step == steps and result.state["i"] == steps
    return elapsed


class _LoopState(TypedDict):
    i: int
    n: int


async def _langgraph_loop(path: Path, steps: int) -> float:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import StateGraph

    def tick(state: _LoopState) -> dict[str, int]:
        return {"i": state["i"] + 1}

    def again(state: _LoopState) -> str:
        return "tick" if state["i"] < state["n"] else END

    builder = StateGraph(_LoopState)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", again, ["tick", END])
    async with aiosqlite.connect(path) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        app = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "loop"}, "recursion_limit": steps + 10}
        start = time.perf_counter()
        result = await app.ainvoke({"i": 0, "n": steps}, config, durability="sync")
        elapsed = time.perf_counter() - start
    assert result["i"] == steps
    return elapsed


async def _memory_runtime(steps: int) -> float:
    """The runtime alone: the same loop on the in-memory store (no disk)."""
    graph = Graph("loop").add_node("tick", _tick).add_edge(START, "tick")
    graph.add_conditional_edges("tick", _again, ["tick", END])
    compiled = graph.compile(MemoryCheckpointer(), step_limit=steps + 1)
    start = time.perf_counter()
    await compiled.run({"i": 0, "n": steps}, thread="loop")
    return time.perf_counter() - start


async def _memory_langgraph(steps: int) -> float:
    """LangGraph alone: the same loop on its InMemorySaver."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import StateGraph

    builder = StateGraph(_LoopState)
    builder.add_node("tick", lambda state: {"i": state["i"] + 1})
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", _again, ["tick", END])
    app = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "loop"}, "recursion_limit": steps + 10}
    start = time.perf_counter()
    await app.ainvoke({"i": 0, "n": steps}, config, durability="sync")
    return time.perf_counter() - start


async def _on_disk(fn: Callable[[Path, int], Awaitable[float]], steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return await fn(Path(tmp) / "bench.db", steps)


async def run(quick: bool) -> list[Table]:
    steps = 200 if quick else 1_000
    samples: dict[str, list[float]] = {}
    for _ in range(REPEATS):  # interleaved, so a noisy neighbour hits every row alike
        for name, fn in _DISK.items():
            samples.setdefault(name, []).append(await _on_disk(fn, steps))
        samples.setdefault("memory-ours", []).append(await _memory_runtime(steps))
        samples.setdefault("memory-theirs", []).append(await _memory_langgraph(steps))
    bare, ours, theirs, cpu_ours, cpu_theirs = (
        statistics.median(samples[k])
        for k in ("bare", "ours", "theirs", "memory-ours", "memory-theirs")
    )
    writes = steps + 1

    def row(name: str, seconds: float, versus: str) -> list[str]:
        return [name, f"{seconds / writes * 1e6:,.0f} µs", f"{steps / seconds:,.0f}/s", versus]

    table = Table(
        f"Runtime step loop ({steps:,} no-op steps; SQLite with WAL, synchronous=FULL)",
        ["what", "per step", "steps/s", "compared"],
        [
            row("bare SQLite put (floor)", bare, "1.00x"),
            row("agentflow runtime, SQLite", ours, f"{ratio(ours, bare)} of a bare put"),
            row(
                "LangGraph + AsyncSqliteSaver",
                theirs,
                f"agentflow {ratio(theirs, ours)} faster",
            ),
            row("agentflow runtime, in memory", cpu_ours, "runtime CPU only"),
            row(
                "LangGraph, InMemorySaver",
                cpu_theirs,
                f"agentflow {ratio(cpu_theirs, cpu_ours)} faster",
            ),
        ],
        [
            f"median of {REPEATS} interleaved runs, fresh file each; one checkpoint per step",
            "targets: runtime <= 1.3x a bare put; >= 3x LangGraph's steps/s",
            "LangGraph runs with durability='sync': each step is on disk before the next",
            "bare put: the same checkpoints with put(if_revision=0) and no runtime",
        ],
    )
    return [table]


_DISK: dict[str, Callable[[Path, int], Awaitable[float]]] = {
    "bare": _bare_puts,
    "ours": _runtime_loop,
    "theirs": _langgraph_loop,
}
