"""A resume that loses to another says who holds the run, and until when."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.checkpoint.redaction import RedactKeys
from agentflow.checkpoint.store import Store
from agentflow.errors import CheckpointConflict
from agentflow.runtime import START, Graph, NodeContext, StepClaimed, Worker, append
from agentflow.runtime.leases import iso_ms
from tests.runtime.clock import Clock
from tests.runtime.conftest import RuntimeBackend
from tests.runtime.graphs import approval_graph, timer_graph
from tests.runtime.holders import epoch_ms, hold

HOLDER = "crashed-host:999:dead"


async def test_a_crashed_resumers_lease_names_the_holder_and_until() -> None:
    store = MemoryCheckpointer()
    compiled = approval_graph().compile(store)
    await compiled.run({"log": []}, thread="c")
    held = await hold(store, "c", HOLDER, lease_ms=60_000)  # ... and that resumer dies
    with pytest.raises(StepClaimed) as info:
        await compiled.resume("c", "yes")
    claimed = info.value
    assert isinstance(claimed, CheckpointConflict) and claimed.code == "checkpoint_conflict"
    until = iso_ms(held.lease_expires_at_ms)
    assert (claimed.holder, claimed.until, claimed.moved_on) == (HOLDER, until, None)
    assert f"is being resumed by {HOLDER} (its claim holds until {until}" in str(claimed)
    assert claimed.step == 2 and claimed.actual == held.revision
    again = pickle.loads(pickle.dumps(claimed))
    assert (again.holder, again.until, str(again)) == (claimed.holder, claimed.until, str(claimed))


async def test_a_late_answer_is_told_who_answered_and_where_the_run_is() -> None:
    compiled = approval_graph().compile(MemoryCheckpointer())
    await compiled.run({"log": []}, thread="a")
    await compiled.resume("a", "yes")
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
    outcomes = await asyncio.gather(
        first.resume("r", "yes", step=2), second.resume("r", "no", step=2), return_exceptions=True
    )
    lost = [o for o in outcomes if isinstance(o, StepClaimed)]
    assert len(lost) == 1
    winner = first if lost[0] is outcomes[1] else second
    assert lost[0].holder == winner.owner


async def test_a_worker_reports_who_holds_a_due_run() -> None:
    clock = Clock()
    store = MemoryCheckpointer(clock=epoch_ms(clock))
    compiled = timer_graph().compile(store, clock=clock)
    await compiled.run({"seconds": 0, "logfile": "/dev/null"}, thread="t")
    await hold(store, "t", HOLDER, lease_ms=30_000)
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


#: Every key the runtime's bookkeeping uses, and a node's name.
BOOKKEEPING = ["graph", "writes", "answers", "by", "operations", "runtime", "extensions", "side"]


async def _survives(store: Store, thread: str) -> None:
    compiled = _sibling_graph().compile(store)
    await compiled.run({}, thread=thread)
    suspended = await store.get(thread)
    assert suspended is not None
    section = suspended.extra["runtime"]
    assert section["graph"] == "sib" and set(section["writes"]) == {"side"}
    result = await compiled.resume(thread, "answer")
    assert result.status == "done" and result.state["log"] == ["side", "answer"]
    assert SIDE_CALLS.count(thread) == 1  # its write was kept, not run again


@pytest.mark.parametrize("key", BOOKKEEPING)
async def test_the_runtimes_bookkeeping_survives_any_redactor(key: str) -> None:
    await _survives(MemoryCheckpointer(redact=RedactKeys([key])), f"s-{key}")


async def test_the_runtimes_bookkeeping_survives_a_redactor_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    async with runtime_backend.open(redact=RedactKeys(BOOKKEEPING)) as store:
        await _survives(store, f"s-all-{runtime_backend.name}")
