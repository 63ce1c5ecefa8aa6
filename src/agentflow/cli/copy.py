"""Copying threads whole from one store to another through the public protocol.

A thread is its checkpoints, its durable record and its events
(:class:`~agentflow.checkpoint.store.Store`); a copy carries all three, so a
run waiting for an operator on the source is waiting on the copy too, and a
``resume`` there does not make its calls again. Only the protocol is used,
so any two backends can be paired, and the destination seals or checks every
part for its own namespace (``--to-namespace``).

Checkpoints keep their content (``ts`` included) and their revision: a step
stored at revision R is written R times, each write conditional on the one
before (``if_revision=0, 1, ... R-1``), which is the only way the protocol
sets a revision. The record is carried as stored (status, claim and lease,
journals, outbox, terminal result, revision) and before the checkpoints;
events are appended once each (:mod:`agentflow.cli.copy_records`).

A copy can be killed at any point and run again. A thread already at the
destination is compared with the source: checkpoints step by step (a start
of the source thread, its last step maybe an older revision, is continued),
the record by content (an older revision of the same run is replaced whole);
an identical thread is left alone; anything else is a different thread,
refused unless ``overwrite`` (then it is replaced). A destination thread that
is *ahead* of the source (more checkpoints, a later latest step or a newer
write of it, a later revision of the same run's record: a backup restored
over a live store) is never replaced unless ``overwrite_newer`` says so. An
id the destination cannot hold (a ``file://`` store refuses ``a/b``) is
skipped before anything is written and listed; the other threads are copied.
Afterwards every copied thread is read back from the destination: its
checkpoint count, latest step and revision, its record and its events are
checked against the source's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.rows import identity_of
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.checkpoint.walk import StoreIds
from agentflow.cli.copy_records import (
    EventIds,
    RecordPlan,
    copy_events,
    describe_record,
    held_events,
    load_record,
    plan_record,
)
from agentflow.errors import InvalidThreadId

__all__ = ["CopyReport", "Outcome", "StoreCopy", "count_threads", "has_thread", "source_threads"]

T = TypeVar("T")

#: Ids read per listing page.
_PAGE = 500
#: What happened to one thread: ``copied`` (new, or continued), ``unchanged``
#: (already identical), ``replaced`` (differed; overwritten), ``refused`` (differs,
#: left alone), ``skipped`` (an id the destination cannot hold).
Outcome = Literal["copied", "unchanged", "replaced", "refused", "skipped"]


@dataclass(frozen=True, slots=True)
class _Steps:
    """A thread's checkpoints as the read-back compares them."""

    count: int
    last_step: int | None = None
    last_revision: int | None = None

    def __str__(self) -> str:
        if self.count == 0:
            return "no checkpoints"
        return (
            f"{self.count} checkpoints up to step {self.last_step} (revision {self.last_revision})"
        )


@dataclass(frozen=True, slots=True)
class _Expected:
    """What the destination must hold for a thread once it is copied."""

    steps: _Steps
    events: EventIds


@dataclass
class CopyReport:
    """What a copy did."""

    threads: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Threads that differ at the destination and were left alone.
    refused: list[str] = field(default_factory=list)
    #: Of those, the ones the destination holds ahead of the source.
    newer: list[str] = field(default_factory=list)
    #: Ids the destination cannot hold, with its reason; nothing of them was written.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Checkpoints read from the source, and puts sent to the destination.
    checkpoints: int = 0
    writes: int = 0
    #: Durable records read from the source, and created or restored at the destination.
    records: int = 0
    records_written: int = 0
    #: Events read from the source, and those new at the destination.
    events: int = 0
    events_written: int = 0
    #: Threads whose read-back did not match, with what was found.
    mismatched: list[tuple[str, str]] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return self.outcomes.get(outcome, 0)


async def source_threads(store: Store) -> AsyncIterator[str]:
    """Every thread id of ``store`` (its namespace): with checkpoints, a record or both."""
    async for thread in StoreIds(store, page_size=_PAGE):
        yield thread


async def count_threads(store: Store) -> int:
    return sum([1 async for _ in source_threads(store)])


async def has_thread(store: Store, thread: str) -> bool:
    """Whether ``store`` holds anything of ``thread`` (a checkpoint or a record)."""
    return await store.get(thread) is not None or await load_record(store, thread) is not None


def _same_content(a: Checkpoint, b: Checkpoint) -> bool:
    return dataclasses.replace(a, revision=0) == dataclasses.replace(b, revision=0)


#: A start of the source thread found at the destination: the checkpoints
#: matched, the last of them (the source's), and the revision the destination has of it.
_Matched = tuple[int, Checkpoint, int]


class StoreCopy:
    """Copies threads from ``source`` to ``destination``, ``concurrency`` at a time."""

    def __init__(
        self,
        source: Store,
        destination: Store,
        *,
        overwrite: bool = False,
        overwrite_newer: bool = False,
        concurrency: int = 8,
        on_thread: Callable[[str, Outcome], None] | None = None,
    ) -> None:
        self.source = source
        self.destination = destination
        self.overwrite = overwrite or overwrite_newer
        self.overwrite_newer = overwrite_newer
        self.concurrency = concurrency
        self.on_thread = on_thread
        self.report = CopyReport()
        self._expected: dict[str, _Expected] = {}

    async def run(self, threads: AsyncIterable[str] | None = None) -> CopyReport:
        """Copy ``threads`` (None: every thread of the source), then read every
        copied one back; return the report."""
        await self.copy(threads)
        await self.verify()
        return self.report

    async def copy(self, threads: AsyncIterable[str] | None = None) -> None:
        """Copy ``threads``, None meaning all (the first half of :meth:`run`)."""
        items = _presence(self.source, self.destination) if threads is None else _unknown(threads)
        await self._each(items, self._copy)

    async def verify(self) -> None:
        """Read every thread copied so far back from the destination and record
        in ``report.mismatched`` those that do not match (the second half)."""
        await self._each(_listed(list(self._expected)), self._verify)

    async def _each(self, items: AsyncIterable[T], work: Callable[[T], Awaitable[None]]) -> None:
        slots = asyncio.Semaphore(self.concurrency)

        async def one(item: T) -> None:
            try:
                await work(item)
            finally:
                slots.release()

        try:
            async with asyncio.TaskGroup() as group:
                async for item in items:
                    await slots.acquire()
                    group.create_task(one(item))
        except ExceptionGroup as failed:  # the first failure says why; the rest stopped
            raise failed.exceptions[0] from None

    async def _copy(self, item: tuple[str, bool | None]) -> None:
        thread, present = item
        outcome = await self._copy_thread(thread, present)
        report = self.report
        report.threads += 1
        report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        if outcome == "refused":
            report.refused.append(thread)
        if self.on_thread is not None:
            self.on_thread(thread, outcome)

    async def _copy_thread(self, thread: str, present: bool | None) -> Outcome:
        try:  # the first call on the id at the destination, before anything is written
            existing = await self.destination.get(thread)
        except InvalidThreadId as refused:
            self.report.skipped.append((thread, str(refused)))
            return "skipped"
        # Fresh: the listing walk found nothing there, and the read just made agrees.
        fresh = present is False and existing is None
        outcome = await self._copy_once(thread, fresh, existing)
        if outcome is not None:
            return outcome
        ahead = await self._ahead(thread)
        if not self.overwrite or (ahead and not self.overwrite_newer):
            if ahead:
                self.report.newer.append(thread)
            return "refused"
        await self.destination.delete_thread(thread)
        await self._copy_once(thread, True, None)
        return "replaced"

    async def _ahead(self, thread: str) -> bool:
        """Whether the destination's thread is ahead of the source's: more
        checkpoints, a later latest step or a newer write of it, or a later
        revision of the same run's record (what a replace would lose)."""
        theirs, ours = await self.destination.get(thread), await self.source.get(thread)
        if theirs is not None and ours is None:
            return True
        if theirs is not None and ours is not None:
            if (theirs.step, theirs.revision) > (ours.step, ours.revision):
                return True
            if theirs.step == ours.step and parse_instant(theirs.ts) > parse_instant(ours.ts):
                return True
            if await _count(self.destination, thread) > await _count(self.source, thread):
                return True
        held, source = (
            await load_record(self.destination, thread),
            await load_record(self.source, thread),
        )
        if held is None:
            return False
        if source is None:
            return True
        return identity_of(held) == identity_of(source) and held.revision > source.revision

    async def _copy_once(
        self, thread: str, fresh: bool, existing: Checkpoint | None
    ) -> Outcome | None:
        """Copy the thread unless the destination holds another one (then None)."""
        source = aiter(self.source.history(thread))
        try:
            return await self._copy_parts(thread, fresh, existing, source)
        finally:
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()

    async def _copy_parts(
        self,
        thread: str,
        fresh: bool,
        existing: Checkpoint | None,
        source: AsyncIterator[Checkpoint],
    ) -> Outcome | None:
        """Compare the thread at the destination (writing nothing), then write its
        record, the rest of its checkpoints and its events, in that order.
        ``fresh``: the destination holds nothing of it (its record is not read);
        ``existing``: its latest checkpoint there."""
        matched: _Matched | None = None
        if fresh:
            record = RecordPlan.of(await load_record(self.source, thread), None)
        else:
            record = await plan_record(self.source, self.destination, thread)
            if existing is not None:
                matched = await self._match(thread, source, existing)
                if matched is None:
                    return None
            if record.action == "conflict":
                return None
        report = self.report
        report.records += record.source is not None
        wrote = await record.apply(self.destination)
        report.records_written += wrote
        count, last = 0, None
        if matched is not None:
            count, last, have = matched
            wrote += await self._write(last, have=have)
        report.checkpoints += count
        async for cp in source:
            wrote += await self._write(cp, have=0)
            count, last = count + 1, cp
            report.checkpoints += 1  # as they go: progress moves inside a long thread too
        events, added = await copy_events(self.source, self.destination, thread)
        report.events += len(events)
        report.events_written += added
        steps = _Steps(0) if last is None else _Steps(count, last.step, last.revision)
        self._expected[thread] = _Expected(steps, events)
        return "copied" if wrote or added else "unchanged"

    async def _match(
        self, thread: str, source: AsyncIterator[Checkpoint], existing: Checkpoint
    ) -> _Matched | None:
        """Match the destination's thread against the start of the source's, writing nothing.

        Returns the checkpoints matched, the source's last matched one and the
        revision the destination holds of it (which may be older, to be
        brought up to date) when the destination holds a start of the source
        thread, else None.
        """
        count = 0
        held = aiter(self.destination.history(thread))
        try:
            async for theirs in held:
                ours = await anext(source, None)
                if ours is None or ours.step != theirs.step or theirs.revision > ours.revision:
                    return None
                if theirs.step == existing.step:  # only the last step may be an older version
                    if theirs.revision == ours.revision and not _same_content(ours, theirs):
                        return None
                    return count + 1, ours, theirs.revision
                if theirs.revision != ours.revision or not _same_content(ours, theirs):
                    return None
                count += 1
        finally:
            close = getattr(held, "aclose", None)
            if close is not None:
                await close()
        return None  # the destination's latest step was not in its history

    async def _write(self, cp: Checkpoint, *, have: int) -> int:
        """Bring the destination's copy of ``cp``'s step from revision ``have``
        to ``cp.revision``; return the puts made."""
        for revision in range(have, cp.revision):
            await self.destination.put(cp, if_revision=revision)
        wrote = max(0, cp.revision - have)
        self.report.writes += wrote
        return wrote

    async def _verify(self, thread: str) -> None:
        """Read the thread back: the checkpoints and events copied must be there,
        and the record must be the source's as it is now (a source that moved on
        during the copy is a mismatch: run the copy again)."""
        expected = self._expected[thread]
        count, last = 0, None
        async for cp in self.destination.history(thread):
            count, last = count + 1, cp
        steps = _Steps(0) if last is None else _Steps(count, last.step, last.revision)
        held = await load_record(self.destination, thread)
        now = await load_record(self.source, thread)
        missing = expected.events - await held_events(self.destination, thread)
        why = None
        if steps != expected.steps:
            why = f"expected {expected.steps}, found {steps}"
        elif (None if held is None else held.to_dict()) != (None if now is None else now.to_dict()):
            why = f"expected the source's {describe_record(now)}, found {describe_record(held)}"
        elif missing:
            why = f"{len(missing)} of {len(expected.events)} event(s) missing"
        if why is not None:
            self.report.mismatched.append((thread, why))


async def _count(store: Store, thread: str) -> int:
    return sum([1 async for _ in store.history(thread)])


async def _listed(threads: list[str]) -> AsyncIterator[str]:
    for thread in threads:
        yield thread


async def _unknown(threads: AsyncIterable[str]) -> AsyncIterator[tuple[str, bool | None]]:
    async for thread in threads:
        yield thread, None


async def _presence(source: Store, destination: Store) -> AsyncIterator[tuple[str, bool | None]]:
    """Every source thread, and whether the destination has it: both walks are
    in code point order, so one walk of each answers for all threads, and a
    fresh destination costs no read of a record per thread."""
    theirs = aiter(source_threads(destination))
    current = await anext(theirs, None)
    async for thread in source_threads(source):
        while current is not None and current < thread:
            current = await anext(theirs, None)
        yield thread, current == thread
