"""Stores holding threads whole (checkpoints, records, events), for the copy and rekey tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentflow.checkpoint.store import Store
from agentflow.cli.copy import source_threads
from agentflow.cli.demo import build_demo_graph, demo_input
from agentflow.durable.enums import ClaimMode
from agentflow.durable.testing.claims import LIVE_MS
from agentflow.durable.testing.harness import make_record
from agentflow.durable.wire.digests import event_payload_digest
from tests.runtime.graphs import lost_reply_graph

__all__ = ["Whole", "fill", "whole"]

Whole = dict[str, tuple[list[Any], dict[str, Any] | None, list[tuple[str, str, Any]]]]


async def whole(store: Store) -> Whole:
    """Every thread: its checkpoints (revisions included), its record, its events."""
    found: Whole = {}
    async for thread in source_threads(store):
        record = await store.load(thread)
        events = (await store.replay(thread, limit=1_000)).events
        found[thread] = (
            [cp async for cp in store.history(thread)],
            None if record is None else record.to_dict(),
            [(e.event_id, e.payload_digest, e.event) for e in events],
        )
    return found


async def _append(store: Store, event_id: str, run_id: str) -> None:
    event = {"event_id": event_id, "run_id": run_id, "type": "operator_note"}
    await store.append_once(event_id, event_payload_digest(event), event)


async def fill(store: Store, ledger: Path) -> None:
    """A run waiting for reconciliation (its charge's reply was lost), a paused
    run, a run a live lease holds, a record without checkpoints, and events."""
    lost = lost_reply_graph().compile(store)
    waiting = await lost.run({"ledger": str(ledger)}, thread="order-7")
    assert waiting.status == "reconciliation_required"
    await build_demo_graph().compile(store).run(demo_input("A-1", 0), thread="paused")
    await store.create(make_record("held"))
    await store.claim(
        "held", cycle_index=1, claim_token="owner-a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
    )
    await store.create(make_record("record-only"))
    for i in range(3):
        await _append(store, f"e{i}", "order-7")
    await _append(store, "e-paused", "paused")
