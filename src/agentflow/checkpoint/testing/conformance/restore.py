"""Replacing a record whole, and storing an event again: what copy and rekey write with."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import CheckpointNotFound, ClaimActive, DurableConflict, DurableError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing.claims import LIVE_MS
from agentflow.durable.testing.harness import make_record, make_tool_entry
from agentflow.durable.wire.digests import event_payload_digest

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["RestoreConformance"]


async def _waiting(store: Store, key: str) -> DurableCheckpoint:
    """``key``'s record waiting for an operator: a call that may have acted, suspended."""
    await store.create(make_record(key))
    record = await store.claim(
        key, cycle_index=1, claim_token="owner-a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
    )
    entry = make_tool_entry(key, 1).start()
    record = await store.record_operations(
        record, [entry, entry.mark_ambiguous()], claim_token="owner-a"
    )
    return await store.suspend(record, claim_token="owner-a")


async def _stored(store: Store, key: str) -> DurableCheckpoint:
    record = await store.load(key)
    assert record is not None
    return record


def _rings() -> tuple[KeyRing, KeyRing, KeyRing]:
    """Key rings: k1 current; k2 current with k1 retired; k2 alone."""
    from agentflow.checkpoint.sealing import KeyRing, new_key  # the sealing extra

    keys = {"k1": new_key(), "k2": new_key()}

    def ring(current: str, **chosen: str) -> KeyRing:
        spec = {"current": current, "keys": chosen, "retired": [k for k in chosen if k != current]}
        return KeyRing.from_source(lambda: spec)

    return ring("k1", k1=keys["k1"]), ring("k2", **keys), ring("k2", k2=keys["k2"])


@pytest.mark.asyncio
class RestoreConformance:
    """``restore`` and ``reseal_event`` of a :class:`~agentflow.checkpoint.store.Store`."""

    async def test_restore_replaces_an_older_record_whole(self, harness: BackendHarness) -> None:
        async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
            await dst.put(make_checkpoint("t", 0, next=("charge",)))
            await dst.create(make_record("t"))
            newer = await _waiting(src, "t")
            stored = await dst.restore(await _stored(dst, "t"), newer)
            loaded = await _stored(dst, "t")
            assert stored.revision == newer.revision
            assert loaded.to_dict() == newer.to_dict()
            assert loaded.status is CheckpointStatus.RECONCILIATION_REQUIRED
            assert loaded.has_ambiguous_operation()
            waiting = await dst.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
            assert [run.key for run in waiting.runs] == ["t"]
            page = await dst.list_threads_page(status="reconciliation_required")
            assert [info.thread for info in page.threads] == ["t"]

    async def test_restore_writes_the_claim_and_lease_as_given(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
            await src.create(make_record("t"))
            await dst.create(make_record("t"))
            held = await src.claim(
                "t", cycle_index=1, claim_token="owner-a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
            )
            await dst.restore(await _stored(dst, "t"), held)
            loaded = await _stored(dst, "t")
            assert (loaded.claim_token, loaded.claimed_cycle) == ("owner-a", 1)
            assert loaded.lease_expires_at_ms == held.lease_expires_at_ms
            with pytest.raises(ClaimActive):
                await dst.claim(
                    "t", cycle_index=1, claim_token="b", lease_ms=LIVE_MS, mode=ClaimMode.RECOVERY
                )
            assert await dst.renew_claim("t", claim_token="owner-a", lease_ms=LIVE_MS) > 0

    async def test_a_write_in_between_wins(self, harness: BackendHarness) -> None:
        async with harness.open(namespace="src") as src, harness.open(namespace="dst") as dst:
            await dst.create(make_record("t"))
            snapshot = await _stored(dst, "t")
            await dst.claim(
                "t", cycle_index=1, claim_token="mine", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
            )
            moved = await _stored(dst, "t")
            newer = await _waiting(src, "t")
            with pytest.raises(DurableConflict):
                await dst.restore(snapshot, newer)
            assert (await _stored(dst, "t")).to_dict() == moved.to_dict()

    async def test_bad_restores_are_refused_before_any_write(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.create(make_record("t"))
            stored = await _stored(store, "t")
            for record, code in (
                (stored, "checkpoint_revision_invalid"),
                (replace(stored, revision=0), "checkpoint_revision_invalid"),
                (replace(stored, checkpoint_key="u", revision=2), "checkpoint_key_invalid"),
            ):
                with pytest.raises(DurableError) as refused:
                    await store.restore(stored, record)
                assert refused.value.code == code
            assert (await _stored(store, "t")).to_dict() == stored.to_dict()
            with pytest.raises(CheckpointNotFound):
                missing = make_record("nobody")
                await store.restore(missing, replace(missing, revision=2))
            assert await store.load("nobody") is None

    async def test_restore_and_reseal_event_move_every_part_to_the_current_key(
        self, harness: BackendHarness
    ) -> None:
        old, rotated, new_only = _rings()
        event = {"event_id": "e1", "run_id": "t", "type": "checkpoint_created"}
        async with harness.open(sealing=old) as first:
            written = await _waiting(first, "t")
            await first.append_once("e1", event_payload_digest(event), event)
        async with harness.open(sealing=rotated) as store:
            record = await _stored(store, "t")
            await store.restore(record, replace(record, revision=record.revision + 1))
            [accepted] = (await store.replay("t")).events
            assert await store.reseal_event(accepted) is True
            unknown = replace(accepted, event_id="nobody")
            assert await store.reseal_event(unknown) is False
        async with harness.open(sealing=new_only) as after:
            loaded = await _stored(after, "t")
            assert loaded.revision == written.revision + 1
            assert loaded.tool_journal == written.tool_journal
            assert [e.event for e in (await after.replay("t")).events] == [event]
