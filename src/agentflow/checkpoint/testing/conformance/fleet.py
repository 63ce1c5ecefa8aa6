"""A worker fleet's store operations: due runs claimed in batches, runs listed by holder."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import DurableError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse
from agentflow.durable.testing.harness import make_record, make_run_definition, make_tool_entry
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = ["FleetConformance"]

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
_OTHER = make_run_definition(agent={"name": "other-agent", "type": None})


def _wake(minutes: int) -> str:
    return (NOW + timedelta(minutes=minutes)).isoformat()


async def _waiting(
    store: Store, thread: str, *, minutes: int = -10, record: bool = True, **fields: object
) -> DurableCheckpoint | None:
    """A thread whose latest step waits on a timer ``minutes`` from NOW, with its record."""
    step = make_checkpoint(thread, 0, next=("n",), interrupted=True, wake_at=_wake(minutes))
    await store.put(step)
    if not record:
        return None
    created = make_record(thread, **fields)
    await store.create(created)
    return created


def _tokens(holder: str, count: int) -> list[str]:
    return [f"{holder}#{index:04}" for index in range(count)]


@pytest.mark.asyncio
class FleetConformance:
    """What every :class:`~agentflow.checkpoint.store.Store` does for a worker fleet."""

    async def test_claim_due_claims_the_due_runs_nobody_holds_in_wake_order(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            for thread, minutes in (("b", -5), ("a", -20), ("c", -1), ("later", 30)):
                await _waiting(store, thread, minutes=minutes)
            await _waiting(store, "no-record", record=False)
            human = make_checkpoint("human", 0, next=("n",), interrupted=True)
            await store.put(human)
            await store.create(make_record("human"))
            claimed = await store.claim_due(NOW, claim_tokens=_tokens("w", 5), lease_ms=LIVE_MS)
            assert [(due.thread, due.step, due.recovery) for due in claimed] == [
                ("a", 0, False),
                ("b", 0, False),
                ("c", 0, False),
            ]
            for due, token in zip(claimed, _tokens("w", 3), strict=True):
                stored = await store.load(due.thread)
                assert stored is not None and stored.to_dict() == due.record.to_dict()
                assert stored.claim_token == token and stored.claimed_cycle == 1
                assert stored.lease_expires_at_ms is not None
            assert await store.claim_due(NOW, claim_tokens=_tokens("v", 5), lease_ms=LIVE_MS) == []

    async def test_claim_due_claims_no_more_than_its_tokens_and_skips_excluded_threads(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            for index in range(5):
                await _waiting(store, f"t{index}", minutes=-10 + index)
            first = await store.claim_due(
                NOW, claim_tokens=_tokens("w", 2), lease_ms=LIVE_MS, exclude=["t0"]
            )
            assert [due.thread for due in first] == ["t1", "t2"]
            rest = await store.claim_due(NOW, claim_tokens=_tokens("v", 9), lease_ms=LIVE_MS)
            assert [due.thread for due in rest] == ["t0", "t3", "t4"]

    async def test_claim_due_keeps_to_the_definitions_asked_for(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            mine = await _waiting(store, "mine")
            await _waiting(store, "theirs", run_definition=_OTHER)
            assert mine is not None
            claimed = await store.claim_due(
                NOW,
                claim_tokens=_tokens("w", 5),
                lease_ms=LIVE_MS,
                definitions=[mine.run_definition_digest],
            )
            assert [due.thread for due in claimed] == ["mine"]
            theirs = await store.load("theirs")
            assert theirs is not None and theirs.claim_token is None

    async def test_max_concurrent_counts_the_live_leases_of_the_definitions(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            for index in range(6):
                await _waiting(store, f"t{index}", minutes=-10 + index)
            await _waiting(store, "other", run_definition=_OTHER, minutes=-30)
            await store.claim(  # a live lease of another definition counts for none of ours
                "other", cycle_index=1, claim_token="x#1", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
            )
            digest = [make_record("any").run_definition_digest]

            async def claim(holder: str, count: int) -> list[str]:
                claimed = await store.claim_due(
                    NOW,
                    claim_tokens=_tokens(holder, count),
                    lease_ms=LIVE_MS,
                    definitions=digest,
                    max_concurrent=3,
                )
                return [due.thread for due in claimed]

            assert await claim("w", 2) == ["t0", "t1"]
            assert await claim("v", 5) == ["t2"]
            assert await claim("u", 5) == []
            done = await store.load("t0")  # its cycle ends, past its timer: room for one more
            assert done is not None
            await store.put(make_checkpoint("t0", 1))  # ran on past its timer
            await store.commit(replace(done, cycle_index=1), claim_token="w#0000")
            assert await claim("s", 5) == ["t3"]

    async def test_claim_due_recovers_a_lapsed_lease_and_leaves_held_and_ended_runs(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            for thread in ("lapsed", "held", "ended", "decision"):
                await _waiting(store, thread)
            for thread, lease in (("lapsed", LAPSED_MS), ("held", LIVE_MS)):
                await store.claim(
                    thread,
                    cycle_index=1,
                    claim_token=f"dead#{thread}",
                    lease_ms=lease,
                    mode=ClaimMode.CONTINUE,
                )
            ended = await store.load("ended")
            assert ended is not None
            completed = CheckpointStatus.COMPLETED
            await store.finalize(
                replace(ended, status=completed, terminal_result={"status": completed.value})
            )
            decision = await store.claim(
                "decision",
                cycle_index=1,
                claim_token="dead#decision",
                lease_ms=LIVE_MS,
                mode=ClaimMode.CONTINUE,
            )
            decision = await store.record_operation(
                decision, make_tool_entry("decision", 1).start(), claim_token="dead#decision"
            )
            decision = await store.record_operation(
                decision, decision.tool_journal[0].mark_ambiguous(), claim_token="dead#decision"
            )
            await store.suspend(decision, claim_token="dead#decision")  # awaits an operator
            await lapse()
            claimed = await store.claim_due(NOW, claim_tokens=_tokens("w", 5), lease_ms=LIVE_MS)
            assert [(due.thread, due.recovery) for due in claimed] == [("lapsed", True)]
            assert claimed[0].record.resume_attempt == 2
            assert claimed[0].record.claim_token == "w#0000"

    async def test_racing_batches_split_the_due_runs_and_never_claim_one_twice(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as first, harness.open() as second:
            for index in range(12):
                await _waiting(first, f"t{index:02}", minutes=-30 + index)

            async def claim(store: Store, holder: str) -> list[str]:
                return [
                    due.thread
                    for due in await store.claim_due(
                        NOW, claim_tokens=_tokens(holder, 4), lease_ms=LIVE_MS
                    )
                ]

            batches = await asyncio.gather(
                *(claim(store, f"w{i}") for i, store in enumerate([first, second] * 3))
            )
            threads = [thread for batch in batches for thread in batch]
            assert sorted(threads) == [f"t{index:02}" for index in range(12)]

    async def test_claim_due_refuses_bad_requests_before_claiming_anything(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _waiting(store, "t")
            assert record is not None
            digest = record.run_definition_digest
            bad_requests: list[dict[str, object]] = [
                {"claim_tokens": []},
                {"claim_tokens": ["a", "a"]},
                {"claim_tokens": [" "]},
                {"claim_tokens": "abc"},
                {"lease_ms": 0},
                {"max_concurrent": 2},
                {"definitions": ["not-a-digest"]},
                {"definitions": [digest], "max_concurrent": 0},
            ]
            for bad in bad_requests:
                request: dict[str, object] = {"claim_tokens": ["w#1"], "lease_ms": LIVE_MS}
                request.update(bad)
                with pytest.raises(DurableError) as info:
                    await store.claim_due(NOW, **request)  # type: ignore[arg-type]
                assert info.value.code == "checkpoint_claim_invalid"
            with pytest.raises(InvalidArgument):
                await store.claim_due("not a time", claim_tokens=["w#1"], lease_ms=LIVE_MS)
            stored = await store.load("t")
            assert stored is not None and stored.claim_token is None

    async def test_list_held_lists_the_claims_of_one_holder(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            for index, holder in enumerate(("w1", "w1", "w10", "w1", "other", "w1x")):
                await store.create(make_record(f"r{index}"))
                await store.claim(
                    f"r{index}",
                    cycle_index=1,
                    claim_token=f"{holder}#{index:04}",
                    lease_ms=LAPSED_MS if index == 3 else LIVE_MS,
                    mode=ClaimMode.CONTINUE,
                )
            await store.create(make_record("free"))
            await lapse()
            page = await store.list_held("w1")
            assert [run.key for run in page.runs] == ["r0", "r1", "r3"]
            assert page.next_cursor is None and all(run.claimed for run in page.runs)
            first = await store.list_held("w1", limit=2)
            assert [run.key for run in first.runs] == ["r0", "r1"]
            assert first.next_cursor is not None
            rest = await store.list_held("w1", limit=2, cursor=first.next_cursor)
            assert [run.key for run in rest.runs] == ["r3"] and rest.next_cursor is None
            assert (await store.list_held("nobody")).runs == []
            with pytest.raises(InvalidCursor):
                await store.list_held("w10", cursor=first.next_cursor)
            for holder in ("", " ", "a#b"):
                with pytest.raises(DurableError):
                    await store.list_held(holder)
