"""``rekey`` re-seals a thread whole on every backend: checkpoints, durable record, events.

The regression of issue 16: following docs/sealing.md's "Moving a plaintext
store to sealing" left every paused run unreadable
(``checkpoint_sealing_invalid``), because the walk re-sealed checkpoints only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.sealing import KeyRing, SealedCodec, new_key, rekey, rekey_command
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import BackendHarness
from agentflow.cli.demo import build_demo_graph
from agentflow.durable import ReconciliationDecision
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse
from agentflow.durable.testing.harness import make_record
from tests.cli.whole_threads import fill
from tests.runtime.graphs import ledger_lines, lost_reply_graph

KEYS = {"k1": new_key(), "k2": new_key()}


def ring(current: str, *, retired: tuple[str, ...] = (), only: bool = False) -> KeyRing:
    keys = {current: KEYS[current]} if only else KEYS
    spec = {"current": current, "keys": keys, "retired": list(retired)}
    return KeyRing.from_source(lambda: spec)


K1, ROTATED, K2_ONLY = ring("k1", only=True), ring("k2", retired=("k1",)), ring("k2", only=True)
THREADS = ["held", "order-7", "paused", "record-only"]


def opener(harness: BackendHarness) -> Any:
    def open_store(codec: CheckpointCodec) -> Store:
        return harness.open(codec=codec)

    return open_store


async def read_all(store: Store) -> dict[str, Any]:
    """Every part of every thread, opened (so each part's seal is checked)."""
    found: dict[str, Any] = {}
    for thread in THREADS:
        record = await store.load(thread)
        found[thread] = (
            [cp.state async for cp in store.history(thread)],
            None if record is None else (record.status, record.tool_journal),
            [e.event for e in (await store.replay(thread)).events],
        )
    return found


async def test_rotation_reseals_records_and_events_and_check_counts_them(
    harness: BackendHarness, tmp_path: Path
) -> None:
    async with harness.open(sealing=K1) as store:
        await fill(store, tmp_path / "ledger")
        before = await read_all(store)
        steps = sum(len(cps) for cps, _, _ in before.values())
    audit = await rekey(opener(harness), ROTATED, check_only=True)
    # events: fill's four, and the runs' lifecycle events (order-7: created, ambiguous,
    # reconciliation required; paused: created)
    assert audit.runs.by_key == {"k1": 4} and audit.events.by_key == {"k1": 8}
    kinds = sorted({(left.kind, left.thread) for left in audit.left if left.kind != "checkpoint"})
    assert kinds == [("event", "order-7"), ("event", "paused")] + [
        ("record", thread) for thread in THREADS
    ]
    assert audit.left_count == steps + 12 and all(left.retired for left in audit.left)

    report = await rekey(opener(harness), ROTATED)
    assert (report.threads, report.resealed) == (4, steps)
    assert (report.runs.found, report.runs.resealed) == (4, 3)  # "held" is held by a live lease
    assert report.busy == ["held"] and report.events.resealed == 8
    assert report.unreadable == [] and report.left == []
    async with harness.open(sealing=K2_ONLY) as after:
        with pytest.raises(DurableCorrupted, match="which the key ring does not hold"):
            await after.load("held")
        await after.delete_thread("held", force=True)
    async with harness.open(sealing=K2_ONLY) as after:
        assert await read_all(after) == {**before, "held": ([], None, [])}
    again = await rekey(opener(harness), ROTATED, check_only=True)
    assert again.left_count == 0 and set(again.runs.by_key) == {"k2"}


async def test_a_lapsed_claim_is_resealed_in_place_and_a_live_one_waits(
    harness: BackendHarness,
) -> None:
    async with harness.open(sealing=K1) as store:
        for key, lease_ms in (("live", LIVE_MS), ("lapsed", LAPSED_MS)):
            await store.create(make_record(key))
            await store.claim(
                key, cycle_index=1, claim_token=f"{key}-owner", lease_ms=lease_ms,
                mode=ClaimMode.CONTINUE,
            )  # fmt: skip
        await lapse()
        lapsed = await store.load("lapsed")
    result = await rekey_command(opener(harness), ROTATED)
    assert result.status == 1 and result.data["busy"] == ["live"]
    assert "busy (a live lease holds the run; run rekey again" in result.text
    async with harness.open(sealing=K2_ONLY) as after:
        resealed = await after.load("lapsed")
        assert lapsed is not None and resealed is not None
        assert resealed.revision == lapsed.revision + 1
        assert (resealed.claim_token, resealed.lease_expires_at_ms) == (
            lapsed.claim_token,
            lapsed.lease_expires_at_ms,
        )
    async with harness.open(sealing=ROTATED) as store:
        await store.renew_claim("live", claim_token="live-owner", lease_ms=LAPSED_MS)
        await lapse()
    done = await rekey_command(opener(harness), ROTATED)
    assert done.status == 0 and done.data["busy"] == []
    assert done.data["durable_records"]["resealed"] == 1


async def test_moving_a_plaintext_store_with_paused_runs_to_sealing(
    harness: BackendHarness, tmp_path: Path
) -> None:
    """docs/sealing.md, "Moving a plaintext store to sealing", step by step."""
    ledger = tmp_path / "ledger"
    async with harness.open() as plain:
        await fill(plain, ledger)
        before = await read_all(plain)
    keys = ring("k1", only=True)
    # 1. Readers and writers sealed, still opening plaintext: paused runs read.
    async with harness.open(codec=SealedCodec(keys, accept_plaintext=True)) as migrating:
        assert await read_all(migrating) == before
    # 2. rekey.
    report = await rekey(opener(harness), keys)
    assert report.runs.by_key == {None: 4} and report.events.by_key == {None: 8}
    assert report.busy == ["held"] and report.runs.resealed == 3
    assert harness.read_part is not None
    assert (await harness.read_part(None, "paused", "body")).startswith(b'[2,"')
    # 3. Plaintext refused from now on: both paused runs go on, sealed.
    async with harness.open(sealing=keys) as sealed:
        await sealed.delete_thread("held", force=True)  # a live lease we made up
        assert await read_all(sealed) == {**before, "held": ([], None, [])}
        demo = build_demo_graph().compile(sealed)
        assert (await demo.resume("paused", "approve")).status == "waiting"  # a timer of 0 s
        assert (await demo.resume("paused")).status == "done"
        lost = lost_reply_graph().compile(sealed)
        assert (await lost.resume("order-7")).status == "reconciliation_required"
        record = await sealed.load("order-7")
        assert record is not None
        operation = record.tool_journal[0].operation_id
        decision = ReconciliationDecision.replay_result({"charged": 700})
        await lost.reconcile("order-7", operation, decision, attempt=1)
        assert (await lost.resume("order-7")).status == "done"
    assert len(ledger_lines(ledger)) == 1


async def test_a_record_written_meanwhile_wins_and_is_listed_while_left_on_the_old_key() -> None:
    shared = MemoryStore()
    async with MemoryCheckpointer(store=shared, sealing=K1) as first:
        for key in ("a", "b"):
            await first.create(make_record(key))
    racer = MemoryCheckpointer(store=shared, sealing=K1)

    class Racing(MemoryCheckpointer):
        async def restore(
            self, stored: DurableCheckpoint, record: DurableCheckpoint
        ) -> DurableCheckpoint:
            key = stored.checkpoint_key  # another process claims it first (a head write)
            await racer.claim(
                key, cycle_index=1, claim_token="x", lease_ms=LAPSED_MS, mode=ClaimMode.CONTINUE
            )
            return await super().restore(stored, record)

    report = await rekey(lambda codec: Racing(store=shared, codec=codec), ROTATED)
    assert (report.runs_skipped, report.runs.resealed) == (2, 0)
    assert [(left.kind, left.thread, left.key_id, left.retired) for left in report.left] == [
        ("record", "a", "k1", True),
        ("record", "b", "k1", True),
    ]
    await lapse()
    again = await rekey(lambda codec: MemoryCheckpointer(store=shared, codec=codec), ROTATED)
    assert again.runs.resealed == 2 and again.left == [] and again.busy == []
