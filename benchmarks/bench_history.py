"""Bounded history: LangGraph's state history on SQLite, the stock saver vs AgentflowSaver.

The graph and the two savers are ``bench_langgraph``'s (a 10-node chain whose
nodes replace a ~10 KB nested state; ``AsyncSqliteSaver`` and
``AgentflowSaver`` over agentflow's SQLite store, both WAL with
``synchronous=FULL``, in one folder). One thread of 1,001 checkpoints each;
then, in interleaved rounds, ``graph.aget_state_history(config, limit=N)``
for N = 1,000, 10 and 1 (the newest page a UI shows), the same page
``before`` the thread's middle checkpoint, and the saver's own
``alist(limit=1,000)`` without LangGraph building snapshots. Medians of the
rounds; the ratio is the stock saver's time over ours (above 1: ours is faster).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from benchmarks.bench_langgraph import NODES, _Contestant, _sqlite
from benchmarks.common import Table, median, ms


async def _listing(contestant: _Contestant, limit: int, before: Any = None) -> float:
    config = {"configurable": {"thread_id": "long"}}
    start = time.perf_counter()
    listed = [
        s async for s in contestant.graph.aget_state_history(config, limit=limit, before=before)
    ]
    elapsed = time.perf_counter() - start
    assert len(listed) == limit, (contestant.label, len(listed))
    return elapsed


async def _saver_listing(contestant: _Contestant, limit: int) -> float:
    """The saver's own ``alist`` (no snapshots built by LangGraph)."""
    config = {"configurable": {"thread_id": "long"}}
    saver = contestant.graph.checkpointer
    start = time.perf_counter()
    listed = [t async for t in saver.alist(config, limit=limit)]
    elapsed = time.perf_counter() - start
    assert len(listed) == limit, (contestant.label, len(listed))
    return elapsed


async def _middle(contestant: _Contestant, checkpoints: int) -> Any:
    config = {"configurable": {"thread_id": "long"}}
    listed = [s async for s in contestant.graph.aget_state_history(config)]
    assert len(listed) >= checkpoints
    return listed[len(listed) // 2].config


async def run(quick: bool) -> list[Table]:
    checkpoints, rounds = (200, 3) if quick else (1_000, 9)
    cases = [(checkpoints, False), (10, False), (1, False), (10, True)]
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        async with _sqlite(tmp) as contestants:
            middles = []
            for contestant in contestants:
                await contestant.fill_history("long", checkpoints + 1)
                middles.append(await _middle(contestant, checkpoints))
            samples: dict[tuple[str, int, bool], list[float]] = {}
            for _ in range(rounds):
                for contestant, middle in zip(contestants, middles, strict=True):
                    for limit, before in cases:
                        took = await _listing(contestant, limit, middle if before else None)
                        samples.setdefault((contestant.label, limit, before), []).append(took)
                    took = await _saver_listing(contestant, checkpoints)
                    samples.setdefault((contestant.label, -1, False), []).append(took)
    table = Table(
        title=f"LangGraph state history on SQLite ({checkpoints + 1:,}-checkpoint thread)",
        headers=[
            "saver",
            *(_case(limit, before) for limit, before in cases),
            f"saver.alist(limit={checkpoints:,})",
        ],
    )
    cases.append((-1, False))
    medians = {key: median(values) for key, values in samples.items()}
    for contestant in contestants:
        table.rows.append(
            [contestant.label]
            + [ms(medians[(contestant.label, limit, before)]) for limit, before in cases]
        )
    stock, ours = contestants[0].label, contestants[1].label
    table.rows.append(
        [f"{ours} / stock"]
        + [
            f"{medians[(stock, limit, before)] / medians[(ours, limit, before)]:.2f}x faster"
            for limit, before in cases
        ]
    )
    table.notes.append(
        f"{NODES}-node graph, ~10 KB state per checkpoint; medians of {rounds} interleaved rounds"
    )
    return [table]


def _case(limit: int, before: bool) -> str:
    return f"limit={limit:,}" + (", before the middle" if before else "")
