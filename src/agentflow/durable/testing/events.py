"""Conformance of :class:`~agentflow.durable.DurableEventStore`: accepted once, replayable."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow.durable.errors import DurableError
from agentflow.durable.testing.harness import DurableHarness
from agentflow.durable.wire.digests import event_payload_digest
from agentflow.errors import InvalidCursor

__all__ = ["EventStoreConformance"]


def event(run: str, n: int, **extra: object) -> dict[str, object]:
    return {"type": "step", "run_id": run, "n": n, **extra}


@pytest.mark.asyncio
class EventStoreConformance:
    async def test_an_event_is_accepted_once(self, durable_harness: DurableHarness) -> None:
        payload = event("run-a", 1)
        digest = event_payload_digest(payload)
        async with durable_harness.events() as store:
            first = await store.append_once("evt-1", digest, payload)
            again = await store.append_once("evt-1", digest, dict(payload))
            page = await store.replay("run-a")
        assert first.inserted and not again.inserted and again.cursor == first.cursor
        assert [(e.event_id, e.event) for e in page.events] == [("evt-1", payload)]

    async def test_identity_conflicts_are_refused(self, durable_harness: DurableHarness) -> None:
        payload = event("run-a", 1)
        digest = event_payload_digest(payload)
        changed = event("run-a", 2)
        async with durable_harness.events() as store:
            await store.append_once("evt-1", digest, payload)
            codes = []
            not_an_object: Any = ["not", "an", "object"]
            calls: tuple[tuple[str, str, Any], ...] = (
                ("evt-1", event_payload_digest(changed), changed),
                ("evt-1", "b" * 64, payload),
                ("evt-2", "b" * 64, payload),
                ("", digest, payload),
                ("evt-3", digest.upper(), payload),
                ("evt-4", digest, not_an_object),
            )
            for call in calls:
                with pytest.raises(DurableError) as caught:
                    await store.append_once(*call)
                codes.append(caught.value.code)
            page = await store.replay("run-a")
        assert codes == [
            "event_identity_conflict",
            "event_identity_conflict",
            "event_payload_digest_mismatch",
            "checkpoint_value_invalid",
            "checkpoint_digest_invalid",
            "event_payload_invalid",
        ]
        assert [(e.event_id, e.event) for e in page.events] == [("evt-1", payload)]

    async def test_racing_appends_accept_one(self, durable_harness: DurableHarness) -> None:
        payload = event("run-a", 1)
        digest = event_payload_digest(payload)
        async with durable_harness.events() as store:
            results = await asyncio.gather(
                *(store.append_once("evt-1", digest, payload) for _ in range(8))
            )
            page = await store.replay("run-a")
        assert sum(result.inserted for result in results) == 1
        assert len({str(result.cursor) for result in results}) == 1
        assert len(page.events) == 1

    async def test_replay_pages_one_run_in_order(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.events() as store:
            for n in range(7):
                for run in ("run-a", "run-b"):
                    payload = event(run, n)
                    await store.append_once(f"{run}-{n}", event_payload_digest(payload), payload)
            child = event("run-c", 0, parent_run_id="run-a")
            await store.append_once("child", event_payload_digest(child), child)
            seen: list[str] = []
            after = None
            while True:
                page = await store.replay("run-a", after=after, limit=3)
                seen += [e.event_id for e in page.events]
                after = page.next_after
                if after is None:
                    break
            family = await store.replay("run-a", include_children=True, limit=100)
            none = await store.replay("run-z")
        assert seen == [f"run-a-{n}" for n in range(7)]
        assert [e.event_id for e in family.events] == [*seen, "child"]
        assert none.events == [] and none.next_after is None

    async def test_replay_resumes_after_an_append_cursor(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.events() as store:
            payloads = [event("run-a", n) for n in range(3)]
            results = [
                await store.append_once(f"e{n}", event_payload_digest(p), p)
                for n, p in enumerate(payloads)
            ]
            page = await store.replay("run-a", after=results[0].cursor)
            with pytest.raises(InvalidCursor):
                await store.replay("run-a", after={"bogus": 1})
        assert [e.event for e in page.events] == payloads[1:]

    async def test_namespaces_and_copies(self, durable_harness: DurableHarness) -> None:
        payload = event("run-a", 1)
        digest = event_payload_digest(payload)
        async with durable_harness.events("t1") as one, durable_harness.events("t2") as two:
            assert (await one.append_once("evt-1", digest, payload)).inserted
            assert (await two.append_once("evt-1", digest, payload)).inserted
            page = await one.replay("run-a")
            page.events[0].event["n"] = 99
            again = await one.replay("run-a")
            other = await two.replay("run-a")
        assert again.events[0].event == payload and len(other.events) == 1
