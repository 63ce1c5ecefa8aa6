"""Conformance: create, load, claims, leases, renewal and fencing."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    DurableCorrupted,
    DurableError,
    LeaseLost,
    RecoveryRequired,
    RevisionConflict,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import DurableEventStore, DurableStore
from agentflow.durable.testing.harness import DurableHarness, make_record

__all__ = ["LAPSED_MS", "LIVE_MS", "ClaimConformance", "claimed", "lapse", "take"]

#: A lease that outlives any test.
LIVE_MS = 600_000
#: A lease that has lapsed once :func:`lapse` returns.
LAPSED_MS = 1


async def lapse() -> None:
    """Wait until a lease of :data:`LAPSED_MS` has certainly lapsed on the store's clock."""
    await asyncio.sleep(0.02)


async def take(
    store: DurableStore,
    token: str,
    *,
    key: str = "run-1",
    cycle: int = 1,
    lease_ms: int = LIVE_MS,
    mode: ClaimMode = ClaimMode.CONTINUE,
) -> DurableCheckpoint:
    """Claim ``cycle`` of ``key`` for ``token``."""
    return await store.claim(
        key, cycle_index=cycle, claim_token=token, lease_ms=lease_ms, mode=mode
    )


async def claimed(
    store: DurableStore, key: str = "run-1", token: str = "owner-a", **fields: object
) -> DurableCheckpoint:
    """Create ``key`` and claim its first cycle with a live lease."""
    await store.create(make_record(key, **fields))
    return await take(store, token, key=key)


@pytest.mark.asyncio
class ClaimConformance:
    async def test_is_a_durable_store(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store("tenant-x") as store, durable_harness.events() as events:
            assert isinstance(store, DurableStore) and isinstance(events, DurableEventStore)
            assert store.namespace == "tenant-x"
            events.store_ref.validate()

    async def test_create_then_load_round_trips(self, durable_harness: DurableHarness) -> None:
        record = make_record("tenant-7/run-42", shared_state={"amount": 12, "note": "é😀"})
        async with durable_harness.store() as store:
            await store.create(record)
            loaded = await store.load("tenant-7/run-42")
        assert loaded is not None
        assert loaded.to_dict() == record.to_dict()
        assert (loaded.revision, loaded.resume_attempt, loaded.claim_token) == (0, 1, None)

    async def test_create_collision_keeps_the_first(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record(shared_state={"v": 1}))
            with pytest.raises(CheckpointAlreadyExists) as caught:
                await store.create(make_record(shared_state={"v": 2}))
            loaded = await store.load("run-1")
        assert caught.value.code == "checkpoint_already_exists"
        assert loaded is not None and loaded.shared_state == {"v": 1}

    async def test_invalid_record_is_refused_and_not_stored(
        self, durable_harness: DurableHarness
    ) -> None:
        record = make_record()
        record.run_definition_digest = "0" * 64
        async with durable_harness.store() as store:
            with pytest.raises(DurableError) as caught:
                await store.create(record)
            assert await store.load("run-1") is None
        assert caught.value.code == "checkpoint_definition_mismatch"

    async def test_load_of_missing_and_bad_keys(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            assert await store.load("absent") is None
            for bad in ("", " \t", "x" * 513, "nul\x00"):
                with pytest.raises(DurableError) as caught:
                    await store.load(bad)
                assert caught.value.code == "checkpoint_key_invalid"

    async def test_continue_claim_sets_claim_and_lease(
        self, durable_harness: DurableHarness
    ) -> None:
        before = int(time.time() * 1000)
        async with durable_harness.store() as store:
            record = await claimed(store)
            loaded = await store.load("run-1")
        after = int(time.time() * 1000)
        assert (record.revision, record.resume_attempt, record.status) == (
            1,
            1,
            CheckpointStatus.RUNNING,
        )
        assert (record.claim_token, record.claimed_cycle) == ("owner-a", 1)
        assert record.lease_expires_at_ms is not None
        assert before + LIVE_MS - 5_000 <= record.lease_expires_at_ms <= after + LIVE_MS + 5_000
        assert loaded is not None and loaded.to_dict() == record.to_dict()

    async def test_claim_refusals_have_their_codes(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            with pytest.raises(CheckpointNotFound):
                await take(store, "t", key="absent")
            await store.create(make_record())
            with pytest.raises(CycleConflict):
                await take(store, "t", cycle=2)
            for cycle, token, lease in ((0, "t", LIVE_MS), (1, " ", LIVE_MS), (1, "t", 0)):
                with pytest.raises(DurableError) as caught:
                    await store.claim(
                        "run-1",
                        cycle_index=cycle,
                        claim_token=token,
                        lease_ms=lease,
                        mode=ClaimMode.CONTINUE,
                    )
                assert caught.value.code == "checkpoint_claim_invalid"
            loaded = await store.load("run-1")
        assert loaded is not None and loaded.revision == 0

    async def test_live_lease_cannot_be_stolen(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            await claimed(store)
            for mode in ClaimMode:
                with pytest.raises(ClaimActive):
                    await take(store, "owner-b", mode=mode)
            loaded = await store.load("run-1")
        assert loaded is not None
        assert (loaded.revision, loaded.resume_attempt, loaded.claim_token) == (1, 1, "owner-a")

    async def test_lapsed_lease_is_taken_over_only_by_recovery(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            await take(store, "owner-a", lease_ms=LAPSED_MS)
            await lapse()
            with pytest.raises(RecoveryRequired):
                await take(store, "owner-b")
            taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        assert (taken.revision, taken.resume_attempt, taken.claim_token) == (2, 2, "owner-b")

    async def test_unclaimed_recovery_claim_counts_a_resume(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            record = await take(store, "owner-r", mode=ClaimMode.RECOVERY)
        assert (record.revision, record.resume_attempt) == (1, 2)

    async def test_racing_recovery_claims_have_one_winner(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            await take(store, "expired", lease_ms=LAPSED_MS)
            await lapse()
            results = await asyncio.gather(
                *(take(store, f"owner-{i}", mode=ClaimMode.RECOVERY) for i in range(8)),
                return_exceptions=True,
            )
            loaded = await store.load("run-1")
        winners = [r for r in results if isinstance(r, DurableCheckpoint)]
        assert len(winners) == 1
        assert all(isinstance(r, ClaimActive) for r in results if r not in winners)
        assert loaded is not None and (loaded.revision, loaded.resume_attempt) == (2, 2)
        assert loaded.claim_token == winners[0].claim_token

    async def test_renewal_moves_only_the_lease(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            first = await take(store, "owner-a", lease_ms=60_000)
            expiry = await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            loaded = await store.load("run-1")
        assert first.lease_expires_at_ms is not None and expiry > first.lease_expires_at_ms
        assert loaded is not None and loaded.lease_expires_at_ms == expiry
        assert loaded.to_dict() == {**first.to_dict(), "lease_expires_at_ms": expiry}

    async def test_renewal_fails_for_another_or_a_lapsed_claim(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            with pytest.raises(CheckpointNotFound):
                await store.renew_claim("absent", claim_token="owner-a", lease_ms=LIVE_MS)
            await store.create(make_record())
            await take(store, "owner-a", lease_ms=LAPSED_MS)
            with pytest.raises(LeaseLost):
                await store.renew_claim("run-1", claim_token="owner-b", lease_ms=LIVE_MS)
            await lapse()
            with pytest.raises(LeaseLost) as caught:
                await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
        assert caught.value.code == "checkpoint_lease_lost"

    async def test_a_holder_whose_lease_was_taken_is_fenced(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            stale = await take(store, "owner-a", lease_ms=LAPSED_MS)
            await lapse()
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
            stale.shared_state = {"zombie": True}
            with pytest.raises(LeaseLost):
                await store.progress(stale, claim_token="owner-a")
            with pytest.raises(LeaseLost):
                await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            loaded = await store.load("run-1")
        assert loaded is not None and loaded.shared_state == {} and loaded.claim_token == "owner-b"

    async def test_progress_keeps_the_claim_and_bumps_the_revision(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS + 1_000)
            record.shared_state = {"step": 1}
            progressed = await store.progress(record, claim_token="owner-a")
            loaded = await store.load("run-1")
        assert progressed.revision == 2 and progressed.claim_token == "owner-a"
        assert loaded is not None and loaded.to_dict() == progressed.to_dict()

    async def test_stale_and_racing_progress(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            results = await asyncio.gather(
                *(
                    store.progress(replace(record, shared_state={"w": i}), claim_token="owner-a")
                    for i in range(5)
                ),
                return_exceptions=True,
            )
            with pytest.raises(RevisionConflict) as caught:
                await store.progress(record, claim_token="owner-a")
            loaded = await store.load("run-1")
        assert sum(isinstance(r, DurableCheckpoint) for r in results) == 1
        assert caught.value.code == "checkpoint_revision_conflict"
        assert loaded is not None and loaded.revision == 2

    async def test_a_snapshot_cannot_change_the_run_identity(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            with pytest.raises(DurableError) as caught:
                await store.progress(replace(record, task_id="other-task"), claim_token="owner-a")
            loaded = await store.load("run-1")
        assert caught.value.code == "checkpoint_definition_mismatch"
        assert loaded is not None and loaded.task_id == "task-1" and loaded.revision == 1

    async def test_returned_records_do_not_alias_storage(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            record.shared_state["mutated"] = True
            loaded = await store.load("run-1")
        assert loaded is not None and loaded.shared_state == {}

    async def test_corrupted_record_raises(self, durable_harness: DurableHarness) -> None:
        if durable_harness.corrupt is None:
            pytest.skip("this backend cannot corrupt its storage from a test")
        async with durable_harness.store() as store:
            await store.create(make_record())
            await durable_harness.corrupt(None, "run-1")
            with pytest.raises(DurableCorrupted):
                await store.load("run-1")
