"""Copying threads from one store to another through the public protocol.

Only ``history``, ``get``, ``list_threads_page``, ``delete_thread`` and
``put(..., if_revision=)`` are used, so any two backends can be paired. Every
checkpoint keeps its content (``ts`` included) and its revision: a step
stored at revision R is written R times, each write conditional on the one
before (``if_revision=0, 1, ... R-1``), which is the only way the protocol
sets a revision. Most steps have revision 1; a resumed suspend has 2.

A copy can be killed at any point and run again. A thread already at the
destination is compared step by step with the source: if it is the start of
the source thread (a copy cut short, or one made before the source went on)
the copy continues it; if it is identical it is left alone; anything else is
a different thread, refused unless ``overwrite`` (then it is replaced).
Afterwards every copied thread is read back from the destination and its
checkpoint count, latest step and revision are checked against the source's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from agentflow.checkpoint.base import Checkpoint, Checkpointer

__all__ = ["CopyReport", "Outcome", "StoreCopy", "count_threads", "source_threads"]

T = TypeVar("T")

#: Threads read per listing page.
_PAGE = 500
#: What happened to one thread: ``copied`` (new, or continued), ``unchanged``
#: (already identical), ``replaced`` (differed; overwritten), ``refused``.
Outcome = Literal["copied", "unchanged", "replaced", "refused"]


@dataclass(frozen=True, slots=True)
class _Expected:
    """What the destination must hold for a thread once it is copied."""

    count: int
    last_step: int
    last_revision: int


@dataclass
class CopyReport:
    """What a copy did."""

    threads: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Threads that differ at the destination and were left alone.
    refused: list[str] = field(default_factory=list)
    #: Checkpoints read from the source, and puts sent to the destination.
    checkpoints: int = 0
    writes: int = 0
    #: Threads whose read-back did not match, with what was found.
    mismatched: list[tuple[str, str]] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return self.outcomes.get(outcome, 0)


async def source_threads(store: Checkpointer) -> AsyncIterator[str]:
    """Every thread id of ``store`` (its namespace), page by page."""
    cursor: str | None = None
    while True:
        page = await store.list_threads_page(limit=_PAGE, cursor=cursor)
        for info in page.threads:
            yield info.thread
        cursor = page.next_cursor
        if cursor is None:
            return


async def count_threads(store: Checkpointer) -> int:
    return sum([1 async for _ in source_threads(store)])


def _same_content(a: Checkpoint, b: Checkpoint) -> bool:
    return dataclasses.replace(a, revision=0) == dataclasses.replace(b, revision=0)


class StoreCopy:
    """Copies threads from ``source`` to ``destination``, ``concurrency`` at a time."""

    def __init__(
        self,
        source: Checkpointer,
        destination: Checkpointer,
        *,
        overwrite: bool = False,
        concurrency: int = 8,
        on_thread: Callable[[str, Outcome], None] | None = None,
    ) -> None:
        self.source = source
        self.destination = destination
        self.overwrite = overwrite
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
        source = aiter(self.source.history(thread))
        existing = await self.destination.get(thread) if present is not False else None
        outcome: Outcome = "copied"
        count, last, wrote = 0, None, 0
        try:
            if existing is not None:
                matched = await self._continue_from(thread, source, existing)
                if matched is None:
                    if not self.overwrite:
                        return "refused"
                    await self.destination.delete_thread(thread)
                    source = aiter(self.source.history(thread))
                    outcome = "replaced"
                else:
                    count, last, wrote = matched
            async for cp in source:
                wrote += await self._write(cp, have=0)
                count, last = count + 1, cp
        finally:
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()
        if outcome == "copied" and wrote == 0:
            outcome = "unchanged"
        self.report.checkpoints += count
        self.report.writes += wrote
        if last is not None:
            self._expected[thread] = _Expected(count, last.step, last.revision)
        return outcome

    async def _continue_from(
        self, thread: str, source: AsyncIterator[Checkpoint], existing: Checkpoint
    ) -> tuple[int, Checkpoint | None, int] | None:
        """Match the destination's thread against the start of the source's.

        Returns ``(checkpoints matched, the last one, puts made)`` when the
        destination holds a start of the source thread (its last step may be
        an older revision, which is brought up to date), else None.
        """
        count, last, wrote = 0, None, 0
        held = aiter(self.destination.history(thread))
        try:
            async for theirs in held:
                ours = await anext(source, None)
                if ours is None or ours.step != theirs.step or theirs.revision > ours.revision:
                    return None
                final = theirs.step == existing.step
                same = _same_content(ours, theirs)
                if not same and (not final or theirs.revision == ours.revision):
                    return None  # only the last step may be an older version
                if not final and theirs.revision != ours.revision:
                    return None
                count, last = count + 1, ours
                if final:
                    wrote += await self._write(ours, have=theirs.revision)
                    return count, last, wrote
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
        return max(0, cp.revision - have)

    async def _verify(self, thread: str) -> None:
        expected = self._expected[thread]
        count, last = 0, None
        async for cp in self.destination.history(thread):
            count, last = count + 1, cp
        found = _Expected(count, last.step, last.revision) if last is not None else None
        if found != expected:
            self.report.mismatched.append(
                (thread, f"expected {_describe(expected)}, found {_describe(found)}")
            )


def _describe(expected: _Expected | None) -> str:
    if expected is None:
        return "no checkpoints"
    return (
        f"{expected.count} checkpoints up to step {expected.last_step} "
        f"(revision {expected.last_revision})"
    )


async def _listed(threads: list[str]) -> AsyncIterator[str]:
    for thread in threads:
        yield thread


async def _unknown(threads: AsyncIterable[str]) -> AsyncIterator[tuple[str, bool | None]]:
    async for thread in threads:
        yield thread, None


async def _presence(
    source: Checkpointer, destination: Checkpointer
) -> AsyncIterator[tuple[str, bool | None]]:
    """Every source thread, and whether the destination has it: both listings
    are in code point order (the protocol's contract), so one walk of each
    answers for all threads, and a fresh destination costs no read per thread."""
    theirs = aiter(source_threads(destination))
    current = await anext(theirs, None)
    async for thread in source_threads(source):
        while current is not None and current < thread:
            current = await anext(theirs, None)
        yield thread, current == thread
