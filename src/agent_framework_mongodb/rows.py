"""Reading one page of a run's checkpoint documents, in (sequence, checkpoint_id) order."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent_framework_mongodb.documents import stored_position
from agent_framework_mongodb.indexes import SIMPLE_COLLATION
from agent_framework_mongodb.telemetry import driver_errors

__all__ = ["PageRows", "collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one page is decoded, synchronously.

    A page's decoded checkpoints are hundreds of fresh containers each, all
    alive until the page is returned, so the collector would otherwise run
    generation after generation over objects that cannot be garbage yet
    (about a quarter of paging time, measured). The block never awaits, so no
    other coroutine runs while it is paused, and it is re-enabled only if it
    was enabled before: a caller that disabled the collector keeps it off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class PageRows:
    """The page queries of one scoped run (every one pinned to the binary collation)."""

    def __init__(self, collection: Any, checkpoint_filter: dict[str, Any]) -> None:
        self._collection = collection
        self._checkpoint_filter = checkpoint_filter

    async def page(
        self, after: tuple[int, str] | None, size: int, projection: dict[str, int] | None
    ) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``size`` rows after ``after`` and whether more follow.

        Sequences are unique per scope, so the query sorts by ``sequence``
        alone, which the sequence index serves without an in-memory sort. The
        row at the cursor's own sequence is re-read on purpose: if another row
        shares a sequence (only possible without the unique index), the page is
        re-read with the exact (sequence, checkpoint_id) sort instead.
        """
        query = dict(self._checkpoint_filter)
        if after is not None:
            query["sequence"] = {"$gte": after[0]}
        with driver_errors(write=False):
            # batch_size: the whole page in the first reply (the server's default
            # first batch of 101 would cost a getMore round trip per page).
            rows = (
                await self._collection.find(query, projection)
                .collation(SIMPLE_COLLATION)
                .sort("sequence", 1)
                .limit(size + 2)
                .batch_size(size + 2)
                .to_list()
            )
            sequences = [stored_position(row)[0] for row in rows]
            if len(set(sequences)) != len(sequences):
                rows = await self._exact(after, size, projection)
        if after is not None:
            rows = [r for r in rows if stored_position(r) > after]
        return rows[:size], len(rows) > size

    async def _exact(
        self, after: tuple[int, str] | None, size: int, projection: dict[str, int] | None
    ) -> list[dict[str, Any]]:
        query: dict[str, Any] = dict(self._checkpoint_filter)
        if after is not None:
            query["$or"] = [
                {"sequence": {"$gt": after[0]}},
                {"sequence": after[0], "checkpoint_id": {"$gt": after[1]}},
            ]
        order = [("sequence", 1), ("checkpoint_id", 1)]
        rows: list[dict[str, Any]] = (
            await self._collection.find(query, projection)
            .collation(SIMPLE_COLLATION)
            .sort(order)
            .limit(size + 1)
            .batch_size(size + 1)
            .to_list()
        )
        return rows
