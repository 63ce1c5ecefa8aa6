"""Conformance: listing pages, status filters, cursors and tenancy."""

from __future__ import annotations

import pytest

from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import CheckpointAlreadyExists
from agentflow.durable.testing.claims import take
from agentflow.durable.testing.harness import DurableHarness, make_record
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = ["ListingConformance"]

#: Keys whose UTF-8 byte order differs from naive expectations, and query syntax.
KEYS = [
    "b",
    "a",
    "tenant-7/run-42",
    "研究/运行-42",
    "\U0001f600",
    "\ue000",
    "'; DROP TABLE x; --",
    "*",
]


@pytest.mark.asyncio
class ListingConformance:
    async def test_pages_cover_every_key_once_in_byte_order(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            for key in KEYS:
                await store.create(make_record(key))
            seen: list[str] = []
            cursor = None
            while True:
                page = await store.list_runs(limit=3, cursor=cursor)
                assert len(page.runs) <= 3
                seen += [run.key for run in page.runs]
                cursor = page.next_cursor
                if cursor is None:
                    break
        assert seen == sorted(KEYS, key=lambda key: key.encode("utf-8"))

    async def test_status_filter_and_summaries(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            for key in ("a", "b", "c"):
                await store.create(make_record(key))
            await take(store, "t", key="b", mode=ClaimMode.RECOVERY)
            running = await store.list_runs(status=CheckpointStatus.RUNNING, limit=2)
            rest = await store.list_runs(
                status=CheckpointStatus.RUNNING, limit=2, cursor=running.next_cursor
            )
            waiting = await store.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
        assert [run.key for run in running.runs + rest.runs] == ["a", "b", "c"]
        assert rest.next_cursor is None and waiting.runs == [] and waiting.next_cursor is None
        b = running.runs[1]
        assert (b.claimed, b.revision, b.resume_attempt, b.terminal) == (True, 1, 2, False)
        assert b.lease_expires_at_ms is not None

    async def test_bad_limits_and_foreign_cursors(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store, durable_harness.store("tenant-b") as other:
            for key in ("a", "b"):
                await store.create(make_record(key))
                await other.create(make_record(key))
            page = await store.list_runs(limit=1)
            assert page.next_cursor is not None
            for limit in (0, -1, True, 10_001):
                with pytest.raises(InvalidArgument):
                    await store.list_runs(limit=limit)
            for cursor in ("", "not-a-cursor", page.next_cursor[:-2] + "AA"):
                with pytest.raises(InvalidCursor):
                    await store.list_runs(cursor=cursor)
            with pytest.raises(InvalidCursor):
                await other.list_runs(cursor=page.next_cursor)
            with pytest.raises(InvalidCursor):
                await store.list_runs(status=CheckpointStatus.RUNNING, cursor=page.next_cursor)

    async def test_namespaces_never_meet(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store("tenant-a") as a, durable_harness.store("tenant-b") as b:
            await a.create(make_record("shared", shared_state={"tenant": "a"}))
            await b.create(make_record("shared", shared_state={"tenant": "b"}))
            with pytest.raises(CheckpointAlreadyExists):
                await a.create(make_record("shared"))
            from_a, from_b = await a.load("shared"), await b.load("shared")
            await a.delete("shared")
            still_b = await b.load("shared")
            listed = await b.list_runs()
        assert from_a is not None and from_a.shared_state == {"tenant": "a"}
        assert from_b is not None and from_b.shared_state == {"tenant": "b"}
        assert still_b is not None and [run.key for run in listed.runs] == ["shared"]
        assert a.namespace == "tenant-a" and b.namespace == "tenant-b"
