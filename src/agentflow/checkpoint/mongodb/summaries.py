"""The thread summaries of one namespace: kept by puts and deletes, read by listings.

A summary names its thread's latest step, that step's revision, status, ``ts``,
wake time and (while it waits on a timer) wake instant. Puts raise it
newer-wins by (step, revision), so concurrent puts converge on the highest
whatever order they land in; deletes and prunes reconcile it with the
checkpoints left by compare-and-set. Every read is one range of one index.
A summary shares its document with the thread's durable record, so every
write here names its own fields and leaves the record's (and ``rs``) alone.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Final

from bson import MaxKey, MinKey
from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.mongodb.documents import (
    DUE_INDEX,
    IMPOSED,
    INFO_FIELDS,
    LISTING_INDEX,
    RUN_STATUS_INDEX,
    STATUS_FIELDS,
    STATUS_INDEX,
    SUMMARY_FIELDS,
    SUMMARY_KEYS,
    Document,
    checkpoint_key,
    newer_wins,
    steps,
    summary_key,
    summary_of,
    summary_of_stored,
    thread_info,
)
from agentflow.checkpoint.mongodb.records import MARKS_READ, UNRECORDED, holds_record

__all__ = ["Summaries"]

#: Rounds of reconciliation while other writers change the thread; a writer that
#: keeps winning writes the summaries itself.
_RECONCILE_ROUNDS: Final = 8


class Summaries:
    """The summaries of ``namespace`` in ``coll``."""

    def __init__(self, coll: AsyncCollection[Document], namespace: str) -> None:
        self._coll = coll
        self._namespace = namespace

    def _raise(
        self, enc: EncodedCheckpoint, revision: int, expires: datetime | None
    ) -> tuple[Document, list[Document]]:
        doc = summary_of(self._namespace, enc, revision)
        return {"_id": summary_key(self._namespace, enc.thread)}, newer_wins(doc, expires)

    def raise_to(
        self, enc: EncodedCheckpoint, revision: int, expires: datetime | None
    ) -> UpdateOne:
        """The upsert that raises the summary of ``enc``'s thread to it, newer-wins,
        as a statement of a put's command."""
        return UpdateOne(*self._raise(enc, revision, expires), upsert=True)

    async def write(self, enc: EncodedCheckpoint, revision: int, expires: datetime | None) -> None:
        """Raise the summary to ``enc`` at ``revision``, a write known to have won.

        The raise is a command of its own, after the step's: a delete that ran
        between them (and reconciled before this raise) would leave the summary
        naming a step that is gone, so a step found gone is reconciled.
        """
        await self._coll.update_one(*self._raise(enc, revision, expires), upsert=True)
        step = {"_id": checkpoint_key(self._namespace, enc.thread, enc.step)}
        if await self._coll.find_one(step, {"_id": 1}) is None:
            await self.reconcile(enc.thread)

    async def reconcile(self, thread: str) -> None:
        """Make the thread's summary that of its latest checkpoint, or remove it.

        Each change is a compare-and-set on the summary as read, so a put that
        raised it meanwhile is never undone, and the loop ends only when one read
        finds summary and checkpoints agreeing: a put whose summary statement was
        ignored against a summary naming a deleted step is caught by the next round.
        A thread left with a record but no checkpoint keeps its document, without
        the summary's fields.
        """
        key = summary_key(self._namespace, thread)
        read = dict.fromkeys(SUMMARY_KEYS, 1) | MARKS_READ
        for _ in range(_RECONCILE_ROUNDS):
            current = await self._coll.find_one({"_id": key}, read)
            latest = await self._coll.find_one(
                {"_id": steps(self._namespace, thread)}, STATUS_FIELDS, sort=[("_id", -1)]
            )
            summarized = current is not None and "ls" in current
            if latest is None:
                if not summarized:
                    return
                assert current is not None
                if holds_record(current):
                    gone = {"$unset": dict.fromkeys(SUMMARY_FIELDS, "")}
                    await self._coll.update_one(_as_read(key, current), gone)
                else:
                    await self._coll.delete_one(_as_read(key, current) | UNRECORDED)
                continue
            wanted = summary_of_stored(self._namespace, latest)
            if current is not None and summarized and _agrees(current, wanted):
                return
            if latest.get("expires_at") is not None:
                wanted["expires_at"] = latest["expires_at"]
            del wanted["_id"]
            update: Document = {"$set": wanted}
            if "wk" not in wanted:
                update["$unset"] = {"wk": ""}
            if summarized:
                assert current is not None
                await self._coll.update_one(_as_read(key, current), update)
            else:
                # a thread with a record but no summary yet has its document already
                with contextlib.suppress(DuplicateKeyError):
                    unsummarized = {"_id": key, "ls": {"$exists": False}}
                    await self._coll.update_one(unsummarized, update, upsert=True)

    async def page(self, after: str, limit: int, status: ThreadStatus | None) -> list[ThreadInfo]:
        """Up to ``limit`` summaries after thread ``after``, of ``status`` if given:
        the status the record imposes, else the latest checkpoint's."""
        query: Document = {"tn": self._namespace, "tt": {"$gt": after}}
        if status is None:
            return await self._read(query, ["tn", "tt"], LISTING_INDEX, limit)
        if status in IMPOSED:
            return await self._read(
                query | {"rs": status}, ["tn", "rs", "tt"], RUN_STATUS_INDEX, limit
            )
        query |= {"st": status, "rs": None}
        return await self._read(query, ["tn", "st", "rs", "tt"], STATUS_INDEX, limit)

    async def due(self, now_us: int, after: tuple[int, str] | None, limit: int) -> list[ThreadInfo]:
        """Up to ``limit`` summaries of timer waits due at ``now_us``, after ``after``.

        One range of the due index bounded by its keys (min inclusive, max
        exclusive): an ``$or`` of the keyset's two cases may be planned as a
        filtered scan instead.
        """
        ns = self._namespace
        if after is None:
            low: list[tuple[str, Any]] = [("tn", ns), ("wk", MinKey()), ("tt", MinKey())]
        else:
            # The least id above ``after``: ids never hold NUL, so none lies between.
            low = [("tn", ns), ("wk", after[0]), ("tt", after[1] + "\x00")]
        high: list[tuple[str, Any]] = [("tn", ns), ("wk", now_us), ("tt", MaxKey())]
        return await self._read({"tn": ns}, ["tn", "wk", "tt"], DUE_INDEX, limit, low, high)

    async def _read(
        self,
        query: Document,
        order: list[str],
        index: str,
        limit: int,
        *bounds: list[tuple[str, Any]],
    ) -> list[ThreadInfo]:
        sort = [(field, 1) for field in order]
        cursor = self._coll.find(query, INFO_FIELDS, sort=sort, limit=limit, hint=index)
        if bounds:
            low, high = bounds
            cursor = cursor.min(low).max(high)
        return [thread_info(doc) for doc in await cursor.to_list()]


def _agrees(summary: Document, wanted: Document) -> bool:
    return all(summary.get(k) == wanted.get(k) for k in SUMMARY_KEYS)


def _as_read(key: Document, summary: Document) -> Document:
    """A filter matching the summary only while it is still as it was read."""
    return {"_id": key} | {k: summary.get(k) for k in SUMMARY_KEYS}
