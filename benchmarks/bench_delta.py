"""A growing conversation: what each step stores, and what reading it back costs.

One conversation, the same for every contestant: each turn appends a ~2 KB
message to ``messages`` (agentflow's ``append`` reducer; LangGraph's
``DeltaChannel``, or its plain ``operator.add`` channel for reference) and
counts the turn, one graph step per turn, on SQLite (one file per
contestant in one folder, WAL, ``synchronous=FULL`` on both sides). The
contestants run interleaved in one process, so load on this shared box hits
them alike:

- agentflow, steps stored as their changes (the runtime passes them; the
  default);
- agentflow with ``store.deltas = False``: every state whole, as before;
- LangGraph with ``DeltaChannel`` on its stock ``AsyncSqliteSaver``, and on
  ``AgentflowSaver`` over agentflow's SQLite store;
- LangGraph's plain channel on ``AsyncSqliteSaver``.

Columns: the database's bytes (files after a WAL checkpoint) over the final
state's JSON bytes; reading the latest state of a thread at turn 10 and at the
last turn (agentflow ``store.get``, LangGraph ``graph.aget_state``, medians of
interleaved rounds) and their ratio; and the cost of a step late in the
conversation over one early (median step time over the last and the first 20
steps, from the stream of stored steps): flat in N is 1.0.
"""

from __future__ import annotations

import contextlib
import operator
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import orjson
from langgraph.channels.delta import DeltaChannel

from benchmarks.common import Table, ms

_WORDS = (
    *("the", "agent", "calls", "a", "tool", "and", "reads", "its", "result", "then", "plans"),
    *("the", "next", "step", "while", "the", "user", "waits", "for", "an", "answer", "about"),
    *("their", "order", "refund", "shipping", "invoice", "account"),
)


def _message(turn: int) -> dict[str, Any]:
    rng = random.Random(turn)
    text = " ".join(rng.choice(_WORDS) for _ in range(420))[:2_000]
    return {"speaker": "user" if turn % 2 else "agent", "text": text, "turn": turn}


@dataclass
class _Sizes:
    turns: int
    early: int
    rounds: int
    reads: int

    @classmethod
    def of(cls, quick: bool) -> _Sizes:
        return cls(40, 5, 2, 10) if quick else cls(200, 10, 7, 40)


@dataclass
class _Contestant:
    label: str
    #: Runs a thread of ``turns`` turns; returns the seconds between stored steps.
    converse: Callable[[str, int], Awaitable[list[float]]]
    #: Reads the latest state of a thread.
    read: Callable[[str], Awaitable[Mapping[str, Any]]]
    path: Path
    #: Seconds between stored steps, per conversation run.
    step_runs: list[list[float]] = field(default_factory=list)
    reads: dict[str, list[float]] = field(default_factory=dict)

    def database_bytes(self) -> int:
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))


async def _timed_stream(events: AsyncIterator[Any], stored: Callable[[Any], bool]) -> list[float]:
    times, last = [], time.perf_counter()
    async for event in events:
        if stored(event):
            now = time.perf_counter()
            times.append(now - last)
            last = now
    return times


def _agentflow_graph(turns: int) -> Any:
    from agentflow.runtime import END, START, Graph, NodeContext, append

    async def turn(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        n = state["turn"] + 1
        return {"turn": n, "messages": [_message(n)]}

    graph = Graph("conversation", reducers={"messages": append})
    graph.add_node("turn", turn).add_edge(START, "turn")
    graph.add_conditional_edges(
        "turn", lambda s: "turn" if s["turn"] < turns else END, ["turn", END]
    )
    return graph


@contextlib.asynccontextmanager
async def _agentflow(path: Path, label: str, *, deltas: bool) -> AsyncIterator[_Contestant]:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

    async with SqliteCheckpointer(path, synchronous="FULL") as store:
        store.deltas = deltas

        async def converse(thread: str, turns: int) -> list[float]:
            compiled = _agentflow_graph(turns).compile(store)
            events = compiled.stream({"turn": 0, "messages": []}, thread=thread)
            return await _timed_stream(events, lambda e: e.kind == "step_stored")

        async def read(thread: str) -> Mapping[str, Any]:
            latest = await store.get(thread)
            assert latest is not None
            return latest.state

        yield _Contestant(label, converse, read, path)


def _batched(state: Any, writes: Sequence[Any]) -> list[Any]:
    """DeltaChannel's reducer: the state and a batch of writes (each a list)."""
    return [*state, *(item for write in writes for item in write)]


class _DeltaState(TypedDict):
    turn: int
    messages: Annotated[list[dict[str, Any]], DeltaChannel(_batched)]


class _PlainState(TypedDict):
    turn: int
    messages: Annotated[list[dict[str, Any]], operator.add]


def _langgraph_graph(saver: Any, *, delta: bool, turns: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    def turn(state: Mapping[str, Any]) -> dict[str, Any]:
        n = state["turn"] + 1
        return {"turn": n, "messages": [_message(n)]}

    builder: Any = StateGraph(_DeltaState if delta else _PlainState)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_conditional_edges("turn", lambda s: "turn" if s["turn"] < turns else END)
    return builder.compile(checkpointer=saver)


def _langgraph(saver: Any, label: str, path: Path, *, delta: bool) -> _Contestant:
    graphs: dict[int, Any] = {}

    def graph(turns: int) -> Any:
        if turns not in graphs:
            graphs[turns] = _langgraph_graph(saver, delta=delta, turns=turns)
        return graphs[turns]

    async def converse(thread: str, turns: int) -> list[float]:
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 10 * turns}
        events = graph(turns).astream({"turn": 0, "messages": []}, config, stream_mode="updates")
        return await _timed_stream(events, lambda _: True)

    async def read(thread: str) -> Mapping[str, Any]:
        config = {"configurable": {"thread_id": thread}}
        snapshot = await graph(1).aget_state(config)
        return dict(snapshot.values)

    return _Contestant(label, converse, read, path)


@contextlib.asynccontextmanager
async def _contestants(folder: str) -> AsyncIterator[list[_Contestant]]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agentflow.checkpoint.sqlite import SqliteCheckpointer
    from agentflow.integrations.langgraph import AgentflowSaver

    root = Path(folder)
    async with contextlib.AsyncExitStack() as stack:
        contestants = [
            await stack.enter_async_context(
                _agentflow(root / "deltas.db", "agentflow (steps as changes)", deltas=True)
            ),
            await stack.enter_async_context(
                _agentflow(
                    root / "whole.db", "agentflow (deltas=False: whole states)", deltas=False
                )
            ),
        ]
        for name, delta in (("lg_delta.db", True), ("lg_plain.db", False)):
            conn = await stack.enter_async_context(aiosqlite.connect(root / name))
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            label = (
                "LangGraph DeltaChannel, AsyncSqliteSaver"
                if delta
                else "LangGraph operator.add, AsyncSqliteSaver"
            )
            contestants.append(_langgraph(saver, label, root / name, delta=delta))
        ours = await stack.enter_async_context(
            SqliteCheckpointer(root / "lg_ours.db", synchronous="FULL")
        )
        contestants.append(
            _langgraph(
                AgentflowSaver(ours),
                "LangGraph DeltaChannel, AgentflowSaver(SQLite)",
                root / "lg_ours.db",
                delta=True,
            )
        )
        yield contestants


async def _measure(contestants: list[_Contestant], sizes: _Sizes) -> Table:
    final: dict[str, Any] = {}
    stored: dict[str, int] = {}
    for contestant in contestants:
        await contestant.converse("early", sizes.early)
        contestant.step_runs.append(await contestant.converse("long", sizes.turns))
        final[contestant.label] = await contestant.read("long")
        stored[contestant.label] = contestant.database_bytes()
    for run in range(2):  # more conversations, interleaved, for the step costs only
        for contestant in contestants:
            contestant.step_runs.append(await contestant.converse(f"again-{run}", sizes.turns))
    reference = final[contestants[0].label]
    for label, state in final.items():
        assert state["messages"] == reference["messages"], f"{label} read another state"
    state_bytes = len(orjson.dumps(reference))
    for _ in range(sizes.rounds):
        for contestant in contestants:
            samples: dict[str, list[float]] = {"early": [], "long": []}
            for _ in range(sizes.reads):  # the two reads alternate: a burst hits both
                for thread, taken in samples.items():
                    start = time.perf_counter()
                    await contestant.read(thread)
                    taken.append(time.perf_counter() - start)
            for thread, taken in samples.items():
                contestant.reads.setdefault(thread, []).append(statistics.median(taken))
            ratio = statistics.median(samples["long"]) / statistics.median(samples["early"])
            contestant.reads.setdefault("ratio", []).append(ratio)
    table = Table(
        title=f"A {sizes.turns}-turn conversation (a ~2 KB message per turn) on SQLite",
        headers=[
            "contestant",
            "database / final state",
            f"read at turn {sizes.early}",
            f"read at turn {sizes.turns}",
            "read ratio",
            "late step / early step",
        ],
    )
    window = min(20, sizes.turns // 4)
    for contestant in contestants:
        early = statistics.median(contestant.reads["early"])
        late = statistics.median(contestant.reads["long"])
        slope = statistics.median(
            statistics.median(steps[-window:]) / statistics.median(steps[1 : window + 1])
            for steps in contestant.step_runs
        )
        table.rows.append(
            [
                contestant.label,
                f"{stored[contestant.label] / state_bytes:.1f}x",
                ms(early),
                ms(late),
                f"{statistics.median(contestant.reads['ratio']):.2f}x",
                f"{slope:.2f}x",
            ]
        )
    table.notes.append(
        f"final state {state_bytes:,} bytes of JSON; reads: median of {sizes.rounds} interleaved "
        f"rounds, each the median of {sizes.reads} reads at each turn, alternating (the read "
        f"ratio is the median of the rounds' ratios); steps: median of the last {window} "
        f"step times over the median of the first {window} (step 1 on), the median over "
        "three conversations run interleaved; the database holds the first two threads only"
    )
    return table


async def run(quick: bool) -> list[Table]:
    sizes = _Sizes.of(quick)
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as folder:
        async with _contestants(folder) as contestants:
            return [await _measure(contestants, sizes)]
