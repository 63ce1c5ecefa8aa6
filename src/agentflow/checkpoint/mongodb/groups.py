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

A put's last statement may raise its thread's summary, newer-wins
(:class:`Raise`). In one command only the highest raise of each thread is sent
(a LangGraph step's writes and checkpoint raise the same summary): newer-wins
ends where that one alone leaves it. If the command stops before the raise that
stood for an answered put's, that put's own raise is sent before it is answered.
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

__all__ = ["GroupResult", "Raise", "WriteGroups"]

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


@dataclass(frozen=True, slots=True)
class Raise:
    """A put's last statement raises ``thread``'s summary to ``order`` (step, revision),
    newer-wins: a raise of the same thread to a higher order in the command makes it
    redundant."""

    thread: str
    order: tuple[int, int]


@dataclass(slots=True)
class _Put:
    statements: Sequence[Statement]
    raises: Raise | None
    done: asyncio.Future[GroupResult]


@dataclass(slots=True)
class _Command:
    """A group's statements as sent: each one's put and index in it, and the raises left out."""

    statements: list[Statement]
    #: (position of the put in the group, index in its statements) of each statement.
    owners: list[tuple[int, int]]
    #: Put position -> the command index of its raise (or of the one standing for it).
    raised_at: dict[int, int]


def _command(group: list[_Put]) -> _Command:
    """The command of ``group``: every statement but the raises a higher one of the
    same thread in the group makes redundant."""
    highest: dict[str, int] = {}
    for position, put in enumerate(group):
        if put.raises is not None:
            best = highest.get(put.raises.thread)
            if best is None or _order(group[best]) < put.raises.order:
                highest[put.raises.thread] = position
    command = _Command([], [], {})
    for position, put in enumerate(group):
        last = len(put.statements) - 1
        kept = put.raises is None or highest[put.raises.thread] == position
        for i, statement in enumerate(put.statements):
            if i == last and put.raises is not None:
                if not kept:
                    continue
                command.raised_at[position] = len(command.statements)
            command.statements.append(statement)
            command.owners.append((position, i))
    for position, put in enumerate(group):
        if put.raises is not None and position not in command.raised_at:
            command.raised_at[position] = command.raised_at[highest[put.raises.thread]]
    return command


def _order(put: _Put) -> tuple[int, int]:
    assert put.raises is not None
    return put.raises.order


class WriteGroups:
    """Ordered statements of the puts of one loop turn, sent as one command to ``coll``."""

    def __init__(self, coll: AsyncCollection[Document]) -> None:
        self._coll = coll
        #: The group still taking puts, and the loop it was opened on.
        self._open: tuple[asyncio.AbstractEventLoop, list[_Put]] | None = None
        #: Commands in flight, kept alive until they finish.
        self._sending: set[asyncio.Task[None]] = set()

    async def write(
        self, statements: Sequence[Statement], raises: Raise | None = None
    ) -> GroupResult:
        """Run ``statements`` in order, in the command of this loop turn's group (the
        last one raising a summary when ``raises`` says so)."""
        loop = asyncio.get_running_loop()
        put = _Put(statements, raises, loop.create_future())
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
        command = _command(group)
        try:
            result = await self._coll.bulk_write(command.statements)
        except BulkWriteError as exc:
            details: Mapping[str, Any] = exc.details
            errors = details.get("writeErrors") or []
            if details.get("writeConcernErrors") or not errors:
                _fail(group, exc)  # nothing is known to be acknowledged
                return
            failed_at = min(error["index"] for error in errors)
            failed = command.owners[failed_at][0]
            _fail(group[failed : failed + 1], _renumbered(details, command, failed))
            upserted = {entry["index"] for entry in details.get("upserted") or []}
            answered = range(failed)
            unraised = [p for p in answered if command.raised_at.get(p, -1) >= failed_at]
            if unraised:  # their raise was left out for one that never ran
                try:
                    await self._coll.bulk_write([group[p].statements[-1] for p in unraised])
                except Exception as error:
                    _fail([group[p] for p in unraised], error)
            _answer(group, command, upserted, None, answered)
            if rest := group[failed + 1 :]:
                await self._send(rest)  # never applied: an ordered command stopped before
            return
        except (Exception, asyncio.CancelledError) as exc:  # each put raises it, as alone
            _fail(group, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        modified = result.modified_count if len(group) == 1 else None
        _answer(group, command, set(result.upserted_ids or {}), modified, range(len(group)))


def _answer(
    group: list[_Put],
    command: _Command,
    upserted: set[int],
    modified: int | None,
    positions: range,
) -> None:
    """Answer the puts at ``positions`` (those whose statements all ran)."""
    mine: dict[int, set[int]] = {position: set() for position in positions}
    for index in upserted:
        position, i = command.owners[index]
        if position in mine:
            mine[position].add(i)
    for position, indexes in mine.items():
        done = group[position].done
        if not done.done():
            done.set_result(GroupResult(frozenset(indexes), modified))


def _renumbered(details: Mapping[str, Any], command: _Command, position: int) -> BulkWriteError:
    """The failed command's reply as the put at ``position`` would have had it alone."""
    own: dict[str, Any] = {"writeConcernErrors": []}
    for name in _ERROR_FIELDS:
        own[name] = []
        for entry in details.get(name) or []:
            owner, i = command.owners[entry["index"]]
            if owner == position:
                own[name].append({**entry, "index": i})
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
