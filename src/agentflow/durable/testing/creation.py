"""Conformance: a store opened with ``create=False`` never creates its backend's layout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentflow.durable.enums import ClaimMode
from agentflow.durable.store import DurableStore
from agentflow.durable.testing.harness import DurableHarness, make_record
from agentflow.errors import StoreNotFound

__all__ = ["CreationConformance"]


def _contents(harness: DurableHarness) -> Callable[[], Awaitable[object]]:
    """The harness's ``contents`` (it also opens readers), or skip the test."""
    if harness.readers is None or harness.contents is None:
        pytest.skip(f"the {harness.name} harness opens no store without create")
    return harness.contents


@pytest.mark.asyncio
class CreationConformance:
    async def test_a_store_opened_without_create_refuses_an_absent_store_and_creates_nothing(
        self, durable_harness: DurableHarness
    ) -> None:
        contents = _contents(durable_harness)
        before = await contents()
        calls: list[Callable[[DurableStore], Awaitable[object]]] = [
            lambda store: store.load("run-1"),
            lambda store: store.list_runs(),
            lambda store: store.create(make_record("run-1")),
        ]
        for call in calls:
            # Refused when opened (nothing to open) or on the first call (the server says).
            with pytest.raises(StoreNotFound) as refused:
                async with durable_harness.reader() as store:
                    await call(store)
            assert refused.value.code == "store_not_found"
        assert await contents() == before
        async with durable_harness.store() as creator:
            assert await creator.load("run-1") is None

    async def test_a_store_opened_without_create_uses_an_existing_one(
        self, durable_harness: DurableHarness
    ) -> None:
        contents = _contents(durable_harness)
        before = await contents()
        async with durable_harness.store() as creator:
            await creator.create(make_record("run-1"))
        assert await contents() != before  # what the first test compares
        async with durable_harness.reader() as store:
            loaded = await store.load("run-1")
            assert loaded is not None and loaded.checkpoint_key == "run-1"
            assert [run.key for run in (await store.list_runs()).runs] == ["run-1"]
            claimed = await store.claim(
                "run-1", cycle_index=1, claim_token="w", lease_ms=60_000, mode=ClaimMode.CONTINUE
            )
            assert claimed.revision == loaded.revision + 1
