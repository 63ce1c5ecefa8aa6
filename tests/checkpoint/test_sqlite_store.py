"""The SQLite store as one thing: what a step costs in commits (counted on the writer's
connection), commit_step all or nothing, and a thread's status kept across its writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.sqlite.workers import acquire_pair, release_pair
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.enums import ClaimMode
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS
from agentflow.errors import CheckpointNotSerializable
from agentflow.runtime import END, START, Graph, NodeContext, ToolCall

STEPS = 20


@asynccontextmanager
async def commits(store: SqliteCheckpointer) -> AsyncIterator[list[str]]:
    """The COMMITs the file's writer connection runs inside the block (each one an fsync
    under ``synchronous=FULL``)."""
    seen: list[str] = []
    pair = acquire_pair(store._key)

    def trace(statement: str) -> None:
        if statement == "COMMIT":
            seen.append(statement)

    try:
        await pair.writer.submit(lambda: lambda conn: conn.set_trace_callback(trace))
        seen.clear()
        yield seen
    finally:
        await pair.writer.submit(lambda: lambda conn: conn.set_trace_callback(None))
        await release_pair(store._key, pair)


async def _charge(call: ToolCall) -> dict[str, Any]:
    return {"charged": call.arguments["i"]}


def _steps(*, idempotent: bool) -> Graph:
    """``STEPS`` steps, each one call."""

    async def tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.tool("charge", {"i": state["i"]}, _charge, idempotent=idempotent)
        return {"i": state["i"] + 1}

    graph = Graph("steps").add_node("tick", tick).add_edge(START, "tick")
    again = lambda s: "tick" if s["i"] < STEPS else END  # noqa: E731
    return graph.add_conditional_edges("tick", again, ["tick", END])


def _one_node(calls: int) -> Graph:
    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"receipts": [await ctx.tool("charge", {"i": i}, _charge) for i in range(calls)]}

    return Graph("one-node").add_node("n", charge).add_edge(START, "n")


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        # the run's start (the input's put, the record's create and claim: one
        # transaction); per step the call's started entry and the step's commit (its
        # receipt riding it); the finalize.
        (_steps(idempotent=False), 1 + 2 * STEPS + 1),
        # An idempotent call writes nothing before it goes out: one commit per step.
        (_steps(idempotent=True), 1 + STEPS + 1),
        # 20 calls in one node: 20 started entries (each receipt riding the next), one step.
        (_one_node(STEPS), 1 + STEPS + 1 + 1),
    ],
    ids=["at-most-once", "idempotent", "twenty-calls-one-node"],
)
async def test_commits_per_step(tmp_path: Path, graph: Graph, expected: int) -> None:
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        compiled = graph.compile(store)
        await compiled.run({"i": STEPS}, thread="warm-up")  # the schema, the cursor secret
        async with commits(store) as seen:
            result = await compiled.run({"i": 0}, thread="t")
        assert result.status == "done"
        loaded = await store.load("t")
    assert len(seen) == expected
    assert loaded is not None and loaded.terminal_result is not None


async def test_commit_step_writes_nothing_when_its_checkpoint_cannot_be_encoded(
    tmp_path: Path,
) -> None:
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        await store.put(make_checkpoint("t", 0))
        await store.create(make_record("t"))
        record = await store.claim(
            "t", cycle_index=1, claim_token="a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
        )
        started = make_tool_entry("t", 1).start()
        record = await store.record_operations(record, [started], claim_token="a")
        bad = make_checkpoint("t", 1, state={"x": float("nan")})
        async with commits(store) as seen:
            with pytest.raises(CheckpointNotSerializable):
                await store.commit_step(bad, record, [started.succeed({})], claim_token="a")
        assert seen == []  # refused in prepare: no transaction at all
        loaded = await store.load("t")
        assert loaded is not None and loaded.revision == record.revision
        assert await store.get("t", 1) is None


async def test_concurrent_steps_of_several_threads_share_commits(tmp_path: Path) -> None:
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        records = []
        for n in range(8):
            await store.create(make_record(f"t{n}"))
            records.append(
                await store.claim(
                    f"t{n}",
                    cycle_index=1,
                    claim_token="a",
                    lease_ms=LIVE_MS,
                    mode=ClaimMode.CONTINUE,
                )
            )
        async with commits(store) as seen:
            written = await asyncio.gather(
                *(
                    store.commit_step(make_checkpoint(f"t{n}", 0), r, [], claim_token="a")
                    for n, r in enumerate(records)
                )
            )
        assert [w.revision for w in written] == [r.revision + 1 for r in records]
        assert 1 <= len(seen) < len(records)  # group commit: fewer fsyncs than steps


async def test_a_thread_keeps_its_record_status_through_puts_and_prunes(tmp_path: Path) -> None:
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        for step in range(3):
            await store.put(make_checkpoint("t", step, next=("n",)))
        await store.create(make_record("t"))
        record = await store.claim(
            "t", cycle_index=1, claim_token="a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
        )
        entry = make_tool_entry("t", 1).start()
        record = await store.record_operations(
            record, [entry, entry.mark_ambiguous()], claim_token="a"
        )
        await store.suspend(record, claim_token="a")

        async def status() -> list[str]:
            page = await store.list_threads_page(status="reconciliation_required")
            return [info.thread for info in page.threads]

        assert await status() == ["t"]
        assert await store.prune("t", before_step=2) == 2  # the summary is rebuilt: kept
        assert await status() == ["t"]
        await store.put(make_checkpoint("t", 3, next=("n",)))
        assert await status() == ["t"]
        await store.delete_thread("t")
        assert await status() == [] and await store.list_threads() == []
