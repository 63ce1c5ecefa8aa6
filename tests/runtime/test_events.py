"""The lifecycle events a run emits, delivered into its store's event log, on every backend.

Each event carries the original's wire name, ``evt_`` id and payload
members; it leaves the record's outbox once the log holds it (in the step's
own transaction on SQLite and PostgreSQL), and a holder that dies before
delivering leaves it pending for the next one: the log holds each id once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentflow.checkpoint.store import Store
from agentflow.durable import ReconciliationDecision, stable_event_id
from agentflow.errors import StoreUnavailable
from agentflow.runtime import START, Durability, Graph, ModelCall, NodeContext
from tests.runtime.conftest import RuntimeBackend
from tests.runtime.graphs import approval_graph, ledger_lines, lost_reply_graph

#: What every lifecycle event of a durable run holds besides its payload (the
#: original's RunEvent members; no session, parent or metadata on these).
ENVELOPE = {"type", "version", "event_id", "run_id", "trace_id", "created_at", "cycle_index"}
ENVELOPE |= {"agent_name", "checkpoint_key"}
PAYLOADS = {
    "checkpoint_created": {"resume_attempt"},
    "checkpoint_resumed": {"resume_attempt"},
    "operation_ambiguous": {"operation_id", "operation_kind", "risk", "idempotency_support"},
    "reconciliation_required": {
        "operation_id",
        "operation_kind",
        "interruption_reason",
        "resume_observation",
    },
    "reconciliation_resolved": {"operation_id", "operation_kind", "decision"},
    "operation_replayed": {"operation_id", "operation_kind", "receipt_state"},
    "model_retry_duplicate_risk": {"operation_id", "operation_kind", "risk"},
}


async def _events(store: Store, thread: str) -> list[dict[str, Any]]:
    page = await store.replay(thread, limit=1_000)
    for event in page.events:
        kind = event.event["type"]
        assert set(event.event) == ENVELOPE | PAYLOADS[kind], kind
        assert event.event_id == event.event["event_id"]
        assert event.event["run_id"] == thread and event.event["version"] == "v1"
    return [event.event for event in page.events]


async def _delivered(store: Store, thread: str) -> None:
    record = await store.load(thread)
    assert record is not None
    assert all(entry.state == "delivered" for entry in record.event_outbox)


async def test_a_run_that_waits_for_a_decision_emits_and_delivers_every_event(
    runtime_backend: RuntimeBackend, tmp_path: Path
) -> None:
    ledger = str(tmp_path / "ledger")
    async with runtime_backend.open() as store:
        compiled = lost_reply_graph().compile(store)
        waiting = await compiled.run({"ledger": ledger}, thread="t")
        assert waiting.status == "reconciliation_required"
        [pending] = waiting.reconciliations
        operation = pending.observation.operation_id
        await _delivered(store, "t")
        first = await _events(store, "t")
        assert [e["type"] for e in first] == [
            "checkpoint_created",
            "operation_ambiguous",
            "reconciliation_required",
        ]
        created, ambiguous, required = first
        assert created["event_id"] == stable_event_id("t", "checkpoint_created", ["0"])
        assert (created["resume_attempt"], created["cycle_index"]) == (1, 0)
        assert ambiguous["event_id"] == stable_event_id(
            "t", "operation_ambiguous", [operation, "1"]
        )
        assert (ambiguous["risk"], ambiguous["idempotency_support"]) == (
            "unknown_tool_side_effect",
            "unsupported",
        )
        assert required["interruption_reason"] == "resume_requires_reconciliation"
        assert required["resume_observation"]["operation_id"] == operation
        assert required["cycle_index"] == required["resume_observation"]["cycle_index"] == 1
        await compiled.reconcile(
            "t", operation, ReconciliationDecision.replay_result({"charged": 700}), attempt=1
        )
        done = await compiled.resume("t")
        assert done.status == "done" and len(ledger_lines(ledger)) == 1
        events = await _events(store, "t")
        # the decision's recovery claim, then the resume's (the decision gave the claim
        # back), whose node is answered from the recorded receipt
        assert [e["type"] for e in events[3:]] == [
            "checkpoint_resumed",
            "reconciliation_resolved",
            "checkpoint_resumed",
            "operation_replayed",
        ]
        resumed, resolved, again, replayed = events[3:]
        assert resumed["event_id"] == stable_event_id("t", "checkpoint_resumed", ["2"])
        assert (resumed["resume_attempt"], again["resume_attempt"]) == (2, 3)
        assert resolved["event_id"] == stable_event_id(
            "t", "reconciliation_resolved", [operation, "1"]
        )
        assert resolved["decision"] == "replay_success"
        assert (replayed["operation_id"], replayed["receipt_state"]) == (operation, "succeeded")
        record = await store.load("t")
        assert record is not None and record.event_outbox == []  # dropped with the cycle


async def test_a_resumed_node_replays_its_settled_calls_and_says_so(
    runtime_backend: RuntimeBackend,
) -> None:
    """A node that called and then suspended runs again on resume: its call is
    answered from the journal (``operation_replayed``), not made again."""
    calls: list[str] = []

    def model(call: ModelCall) -> str:
        calls.append(call.operation_id)
        return "plan"

    async def plan(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.model({"model": "m"}, model)
        return {"plan": answer, "ok": ctx.interrupt({"confirm": answer})}

    graph = Graph("planning").add_node("plan", plan).add_edge(START, "plan")
    async with runtime_backend.open() as store:
        compiled = graph.compile(store)
        assert (await compiled.run({}, thread="t")).status == "interrupted"
        assert (await compiled.resume("t", "yes")).status == "done"
        assert len(calls) == 1
        replayed = [e for e in await _events(store, "t") if e["type"] == "operation_replayed"]
        assert [(e["operation_id"], e["receipt_state"]) for e in replayed] == [
            (calls[0], "succeeded")
        ]
        await _delivered(store, "t")


async def test_the_model_policy_retry_emits_its_duplicate_risk(
    runtime_backend: RuntimeBackend,
) -> None:
    sent: list[int] = []

    def flaky(call: ModelCall) -> str:
        sent.append(call.attempt)
        if len(sent) == 1:
            raise TimeoutError("no reply")
        return "ok"

    async def ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"reply": await ctx.model({"model": "m"}, flaky)}

    durability = Durability(ambiguous_model_policy="retry_with_duplicate_risk")
    graph = Graph("asking", durability=durability).add_node("ask", ask).add_edge(START, "ask")
    async with runtime_backend.open() as store:
        compiled = graph.compile(store)
        assert (await compiled.run({}, thread="t")).status == "reconciliation_required"
        assert (await compiled.resume("t")).status == "done" and sent == [1, 2]
        kinds = [e["type"] for e in await _events(store, "t")]
        assert kinds == [
            "checkpoint_created",
            "operation_ambiguous",
            "reconciliation_required",
            "checkpoint_resumed",
            "model_retry_duplicate_risk",
            "reconciliation_resolved",
        ]
        risk = (await _events(store, "t"))[4]
        assert risk["event_id"] == stable_event_id(
            "t", "model_retry_duplicate_risk", [risk["operation_id"], "2"]
        )


async def test_events_a_holder_could_not_deliver_wait_in_the_record_for_the_next(
    runtime_backend: RuntimeBackend,
) -> None:
    """The event log is unavailable for one run (as if its holder died before
    delivering): the events stay pending in the record, and the next holder
    delivers them; the log holds each id once."""
    async with runtime_backend.open() as store:
        real = store.append_once

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("the event log is down")

        store.append_once = unavailable  # type: ignore[method-assign]
        compiled = approval_graph().compile(store)
        assert (await compiled.run({}, thread="t")).status == "interrupted"
        record = await store.load("t")
        assert record is not None
        if getattr(store, "delivers_in_step", False):  # by the step's transaction: the
            assert record.event_outbox == []  # suspend's commit dropped it, delivered
            assert [e["type"] for e in await _events(store, "t")] == ["checkpoint_created"]
        else:
            assert [e.state for e in record.event_outbox] == ["pending"]
            assert await _events(store, "t") == []
        store.append_once = real  # type: ignore[method-assign]
        assert (await compiled.resume("t", "yes")).status == "done"
        events = await _events(store, "t")
        assert Counter(e["event_id"] for e in events).most_common(1)[0][1] == 1
        assert [e["type"] for e in events] == ["checkpoint_created"]
        record = await store.load("t")
        assert record is not None and record.event_outbox == []
