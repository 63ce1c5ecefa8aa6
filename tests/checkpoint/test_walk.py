"""``StoreIds``: every thread id with checkpoints, a record or both, once, in order, resumable."""

from __future__ import annotations

from agentflow.checkpoint.testing import BackendHarness, make_checkpoint
from agentflow.checkpoint.walk import StoreIds, has_record_key
from agentflow.durable.testing.harness import make_record

CHECKPOINTS = {"a", "both-1", "both-2", "c", "zz"}
RECORDS = {"b", "both-1", "both-2", "d", "é"}


async def test_the_walk_is_the_union_in_order_and_resumes_after_any_id(
    harness: BackendHarness,
) -> None:
    async with harness.open() as store:
        for thread in CHECKPOINTS:
            await store.put(make_checkpoint(thread, 0))
        for key in RECORDS:
            await store.create(make_record(key))
        expected = sorted(CHECKPOINTS | RECORDS)
        for size in (1, 2, 3, 100):
            walk = StoreIds(store, page_size=size)
            seen, stops = [], []
            async for thread in walk:
                seen.append(thread)
                stops.append((walk.position, thread))
            assert seen == expected, size
            for position, after in stops:
                rest = [
                    t async for t in StoreIds(store, page_size=size, position=position, after=after)
                ]
                assert rest == expected[expected.index(after) + 1 :], (size, after)


def test_a_thread_id_too_long_for_a_record_has_none() -> None:
    assert has_record_key("t") and not has_record_key("x" * 513) and not has_record_key(" ")
