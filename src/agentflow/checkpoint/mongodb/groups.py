"""Group commit: the new steps put in one event-loop turn go as one ordered command.

A put of a new step is an ordered list of statements (the checkpoint's upsert,
then its summary's). Puts started in the same loop turn (LangGraph's adapter
sends a step's pending writes and the next checkpoint together; concurrent
writers on one client) are sent as one ``update`` command holding every put's
statements in the order the puts came: one round trip and one journal wait
for all of them instead of one each, while each put still returns only once
its own statements are acknowledged.

What each put learns is what it would have learnt alone: the statements it
upserted, and the documents it modified when it was alone in its command (a
command reports one total; shared, the count is unknown and the caller takes
the cautious path). An ordered command stops at its first failing statement:
the puts before it are answered from the server's reply, the put that failed
gets the error (its statements renumbered as if sent alone), and the puts
after it were never applied, so they go again as a command of their own.
A command is retried by the driver as a put alone would be, unless one of its
puts carries a statement that is not retryable (a ``ttl`` refresh of a
thread's older checkpoints, once per expiry bucket).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pymongo import UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError

from agentflow.checkpoint.mongodb.documents import Document

__all__ = ["GroupResult", "WriteGroups"]

Statement = UpdateOne | UpdateMany
#: The reply fields of a failed ordered command that a put's error keeps.
_ERROR_FIELDS: Final = ("writeErrors", "upserted")


@dataclass(frozen=True, slots=True)
class GroupResult:
    """What one put's statements did."""

    #: The indexes, into the put's own statements, of those that inserted a document.
    upserted: frozenset[int]
    #: Documents the put's statements modified; None when other puts shared the command.
    modified: int | None


@dataclass(slots=True)
class _Put:
    statements: Sequence[Statement]
    done: asyncio.Future[GroupResult]


class WriteGroups:
    """Ordered statements of the puts of one loop turn, sent as one command to ``coll``."""

    def __init__(self, coll: AsyncCollection[Document]) -> None:
        self._coll = coll
        #: The group still taking puts, and the loop it was opened on.
        self._open: tuple[asyncio.AbstractEventLoop, list[_Put]] | None = None
        #: Commands in flight, kept alive until they finish.
        self._sending: set[asyncio.Task[None]] = set()

    async def write(self, statements: Sequence[Statement]) -> GroupResult:
        """Run ``statements`` in order, in the command of this loop turn's group."""
        loop = asyncio.get_running_loop()
        put = _Put(statements, loop.create_future())
        if self._open is not None and self._open[0] is loop:
            self._open[1].append(put)
        else:
            group = [put]
            self._open = loop, group
            task = loop.create_task(self._close_and_send(group))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return await put.done

    async def _close_and_send(self, group: list[_Put]) -> None:
        """Runs one loop turn after the group opened: later puts open the next one."""
        if self._open is not None and self._open[1] is group:
            self._open = None
        await self._send(group)

    async def _send(self, group: list[_Put]) -> None:
        statements = [statement for put in group for statement in put.statements]
        try:
            result = await self._coll.bulk_write(statements)
        except BulkWriteError as exc:
            details: Mapping[str, Any] = exc.details
            errors = details.get("writeErrors") or []
            if details.get("writeConcernErrors") or not errors:
                _fail(group, exc)  # nothing is known to be acknowledged
                return
            upserted = {entry["index"] for entry in details.get("upserted") or []}
            failed_at = min(error["index"] for error in errors)
            failed, start = _answer(group, upserted, None, failed_at)
            end = start + len(group[failed].statements)
            _fail(group[failed : failed + 1], _renumbered(details, start, end))
            if rest := group[failed + 1 :]:
                await self._send(rest)  # never applied: an ordered command stopped before
            return
        except (Exception, asyncio.CancelledError) as exc:  # each put raises it, as alone
            _fail(group, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        modified = result.modified_count if len(group) == 1 else None
        _answer(group, set(result.upserted_ids or {}), modified, len(statements))


def _answer(
    group: list[_Put], upserted: set[int], modified: int | None, reached: int
) -> tuple[int, int]:
    """Answer the puts whose statements all ran (those below index ``reached``); return
    the position in ``group`` of the first other put and the index of its first statement."""
    start = 0
    for i, put in enumerate(group):
        end = start + len(put.statements)
        if end > reached:
            return i, start
        if not put.done.done():
            mine = frozenset(index - start for index in upserted if start <= index < end)
            put.done.set_result(GroupResult(mine, modified))
        start = end
    return len(group), start


def _renumbered(details: Mapping[str, Any], start: int, end: int) -> BulkWriteError:
    """The failed command's reply as the put of statements ``start`` to ``end``
    would have had it alone."""
    own: dict[str, Any] = {"writeConcernErrors": []}
    for name in _ERROR_FIELDS:
        own[name] = [
            {**entry, "index": entry["index"] - start}
            for entry in details.get(name) or []
            if start <= entry["index"] < end
        ]
    own["nUpserted"] = len(own["upserted"])
    return BulkWriteError(own)


def _fail(group: list[_Put], exc: Exception | asyncio.CancelledError) -> None:
    for put in group:
        if put.done.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            put.done.cancel()
        else:
            put.done.set_exception(exc)
