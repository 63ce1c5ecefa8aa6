"""A resume that loses to another says who holds the step, and until when."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.redaction import RedactKeys
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.errors import CheckpointConflict
from agentflow.runtime import START, Graph, NodeContext, StepClaimed, Worker, append
from agentflow.runtime.claims import claim_of, take_claim
from tests.runtime.clock import Clock
from tests.runtime.graphs import approval_graph, timer_graph

HOLDER = "crashed-host:999:dead"


async def test_a_crashed_resumers_claim_names_the_holder_and_until() -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store, clock=clock)
    await compiled.run({"log": []}, thread="c")
    suspended = await store.get("c")
    assert suspended is not None
    until = clock.now + timedelta(seconds=60)
    await take_claim(store, suspended, HOLDER, until)  # ... and that resumer dies
    with pytest.raises(StepClaimed) as info:
        await compiled.resume("c", "yes")
    held = info.value
    assert isinstance(held, CheckpointConflict) and held.code == "checkpoint_conflict"
    assert (held.holder, held.until, held.moved_on) == (HOLDER, until.isoformat(), None)
    assert f"is being resumed by {HOLDER} (its claim holds until {until.isoformat()}" in str(held)
    assert (held.expected, held.actual) == (1, 2)
    again = pickle.loads(pickle.dumps(held))
    assert (again.holder, again.until, str(again)) == (held.holder, held.until, str(held))


async def test_a_late_answer_is_told_who_answered_and_where_the_run_is() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store, claim_ttl=timedelta(microseconds=1))
    await compiled.run({"log": []}, thread="a")
    await compiled.resume("a", "yes")
    await asyncio.sleep(0.001)
    with pytest.raises(StepClaimed) as info:
        await compiled.resume("a", "no", step=2)
    assert info.value.moved_on == 4 and info.value.holder == compiled.owner
    assert f"was already answered by {compiled.owner}; the run has moved on to step 4" in str(
        info.value
    )


async def test_the_loser_of_a_race_is_told_the_winner() -> None:
    store = MemoryCheckpointer()
    first, second = approval_graph().compile(store), approval_graph().compile(store)
    await first.run({"log": []}, thread="r")
    suspended = await store.get("r")
    assert suspended is not None
    outcomes = await asyncio.gather(
        first.resume("r", "yes", step=2), second.resume("r", "no", step=2), return_exceptions=True
    )
    lost = [o for o in outcomes if isinstance(o, StepClaimed)]
    assert len(lost) == 1
    winner = first if lost[0] is outcomes[1] else second
    assert lost[0].holder == winner.owner


async def test_a_worker_reports_who_holds_a_due_run() -> None:
    clock = Clock()
    store = MemoryCheckpointer()
    compiled = timer_graph().compile(store, clock=clock)
    await compiled.run({"seconds": 0, "logfile": "/dev/null"}, thread="t")
    suspended = await store.get("t")
    assert suspended is not None
    await take_claim(store, suspended, HOLDER, clock.now + timedelta(seconds=30))
    outcome = await Worker([compiled]).run_once()
    [(thread, why)] = outcome.taken
    assert thread == "t" and isinstance(why, StepClaimed) and why.holder == HOLDER


SIDE_CALLS: list[str] = []


async def _side(state: object, ctx: NodeContext) -> dict[str, object]:
    SIDE_CALLS.append(ctx.thread)
    return {"log": ["side"], "ssn": "123-45-6789"}


async def _ask(state: object, ctx: NodeContext) -> dict[str, object]:
    return {"log": [ctx.interrupt("?")]}


def _sibling_graph() -> Graph:
    """side finishes while ask interrupts: the suspend keeps side's writes."""
    graph = Graph("sib", reducers={"log": append}).add_node("side", _side).add_node("ask", _ask)
    return graph.add_edge(START, "side").add_edge(START, "ask")


async def test_user_data_in_the_runtimes_bookkeeping_is_still_redacted() -> None:
    store = MemoryCheckpointer(redact=RedactKeys(["ssn"]))
    await _sibling_graph().compile(store).run({}, thread="s")
    suspended = await store.get("s")
    assert suspended is not None
    assert suspended.extra["runtime"]["writes"]["side"]["ssn"] != "123-45-6789"


@pytest.mark.parametrize("key", ["graph", "writes", "answers", "claim", "runtime", "side"])
async def test_the_runtimes_bookkeeping_survives_any_redactor(tmp_path: Path, key: str) -> None:
    thread = f"s-{key}"
    async with SqliteCheckpointer(tmp_path / "r.db", redact=RedactKeys([key])) as store:
        compiled = _sibling_graph().compile(store)
        await compiled.run({}, thread=thread)
        suspended = await store.get(thread)
        assert suspended is not None
        section = suspended.extra["runtime"]
        assert section["graph"] == "sib" and set(section["writes"]) == {"side"}
        claimed = await take_claim(store, suspended, HOLDER, datetime.now(UTC))
        stored = await store.get(thread)
        assert stored is not None and claim_of(stored) == claim_of(claimed)
        result = await compiled.resume(thread, "answer")
        assert result.status == "done" and result.state["log"] == ["side", "answer"]
        assert SIDE_CALLS.count(thread) == 1  # its write was kept, not run again
