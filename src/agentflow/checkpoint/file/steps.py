"""The file store's checkpoints: one file per step in one directory per thread.

The default namespace keeps the seed's layout, ``root/<thread>/<step:06d>.json``;
a named one lives under ``root/.ns/<hex(namespace)>/``. Every name the store
invents starts with ``.`` and thread ids may not, so no thread id can name one
of them. Beside its steps a thread directory holds ``.head``, a hard link to
its latest step, which readers check (same file as the step it names) before
trusting it; a namespace holds the status and due indexes of
:mod:`~agentflow.checkpoint.file.index`, where a thread's status is its
record's when the record imposes one. Writers of a thread hold its lock
around read-revision-then-``os.replace``, so compare-and-set holds across
processes on one host; readers take no lock. docs/file.md has the design.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Final, get_args

from agentflow.checkpoint.backend import (
    CheckpointerBase,
    Decoded,
    EncodedCheckpoint,
    StepRange,
    StoredRow,
)
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.file import index
from agentflow.checkpoint.file import thread as thread_dir
from agentflow.checkpoint.file.directories import FileParts
from agentflow.checkpoint.file.format import payload_of
from agentflow.checkpoint.file.fs import rmdir
from agentflow.checkpoint.file.index import ThreadState
from agentflow.checkpoint.file.thread import MARKER, StepFile, check_thread, usable
from agentflow.errors import CheckpointCorrupted

__all__ = ["FileSteps"]

#: ``history`` decodes at most this many files, or about this many bytes, per worker call:
#: enough to amortise the thread hop, few enough that the cyclic GC does not keep
#: rescanning a batch of live states (64 files decode at half the speed of 8).
_BATCH_FILES: Final = 8
_BATCH_BYTES: Final = 1 << 20


class FileSteps(FileParts, CheckpointerBase):
    """The checkpoint part of :class:`~agentflow.checkpoint.file.FileCheckpointer`."""

    def _thread_names(self, base: int) -> list[str]:
        """Every thread directory of the namespace (and any link in place of one)."""
        with os.scandir(base) as entries:
            return sorted(
                entry.name
                for entry in entries
                if not entry.name.startswith(MARKER)
                and (entry.is_dir(follow_symlinks=False) or entry.is_symlink())
            )

    def _summary(self, base: int, thread: str) -> ThreadInfo | None:
        tfd = thread_dir.open_thread(base, thread)
        if tfd is None:
            return None
        try:
            found = thread_dir.latest(tfd, thread, whole=False)
        finally:
            os.close(tfd)
        if found is None:
            return None
        return found.header.info(thread, found.step, self._run_status(thread))

    def _state(self, base: int, thread: str) -> ThreadState | None:
        info = self._summary(base, thread)
        return None if info is None else ThreadState.of_info(info)

    def _decode(self, thread: str, found: StepFile) -> Decoded:
        payload = payload_of(found.data, found.start, thread, found.step)
        return self._decode_row(thread, StoredRow(found.step, found.header.revision, payload))

    # -- writes ---------------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        check_thread(thread)
        return await self._io("put", self._put, encode, if_revision)

    def _put(self, encode: Callable[[], EncodedCheckpoint], if_revision: int | None) -> int | None:
        enc = encode()
        base = self._base(create=True)
        assert base is not None
        with self._lock(enc.thread):
            return self._put_locked(base, enc, if_revision)

    def _put_locked(
        self,
        base: int,
        enc: EncodedCheckpoint,
        if_revision: int | None,
        first: Callable[[], object] | None = None,
    ) -> int | None:
        """Store ``enc`` under the thread's lock unless its revision is not
        ``if_revision`` (then return the stored one); ``first`` runs once the
        revision matched, before anything of the step is written."""
        thread, step = enc.thread, enc.step
        tfd = thread_dir.make_thread(base, thread, self._modes.directory)
        try:
            before = thread_dir.latest(tfd, thread, whole=False)
            latest = before is None or step >= before.step
            if before is None or step > before.step:
                current = 0  # no step file is above the latest one
            elif step == before.step:
                current = before.header.revision
            else:
                stored = thread_dir.header_of(tfd, thread, step)
                current = stored.revision if stored else 0
            if if_revision is not None and if_revision != current:
                return current
            if first is not None:
                first()
            imposed = self._run_status(thread)
            old = None if before is None else before.state(imposed)
            new = ThreadState.of(enc.interrupted, enc.done, enc.wake_at, imposed)
            if latest and new != old:  # the new entries first: never one missing
                index.add(base, new, thread, self._modes)
            thread_dir.write(tfd, enc, current + 1, latest, self._modes.file)
            if latest and old is not None:
                index.retire(base, old, new, thread)
        finally:
            os.close(tfd)
        return None

    # -- reads ----------------------------------------------------------------

    async def _read_step(self, thread: str, step: int | None) -> Decoded | None:
        check_thread(thread)
        return await self._io("get", self._get, thread, step)

    def _get(self, thread: str, step: int | None) -> Decoded | None:
        with self._thread_fd(thread) as (_, tfd):
            if tfd is None:
                return None
            if step is None:
                found = thread_dir.latest(tfd, thread, whole=True)
            else:
                found = thread_dir.read(tfd, thread, step)
            return None if found is None else self._decode(thread, found)

    async def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[Decoded]:
        """One listing of the thread's directory, then its files in the order
        asked, in batches of no more files than are left to yield (a step pruned
        since the listing is skipped, and the next one read)."""
        check_thread(thread)
        listed = await self._io("history", self._steps, thread)
        chosen = sorted((s for s in listed if steps.holds(s)), reverse=steps.newest_first)
        start, left = 0, steps.limit
        while start < len(chosen) and left != 0:
            most = _BATCH_FILES if left is None else min(_BATCH_FILES, left)
            batch, start = await self._io("history", self._read_batch, thread, chosen, start, most)
            if left is not None:
                left -= len(batch)
            for cp in batch:
                yield cp

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[Decoded]:
        """The files of the steps asked for (a record's chain), in one worker call."""
        check_thread(thread)
        return await self._io("get", self._read_files, thread, list(steps))

    def _read_files(self, thread: str, steps: list[int]) -> list[Decoded]:
        with self._thread_fd(thread) as (_, tfd):
            if tfd is None:
                return []
            found = (thread_dir.read(tfd, thread, step) for step in steps)
            return [self._decode(thread, file) for file in found if file is not None]

    def _steps(self, thread: str) -> set[int]:
        with self._thread_fd(thread) as (_, tfd):
            return set() if tfd is None else thread_dir.steps(tfd)

    def _read_batch(
        self, thread: str, steps: list[int], start: int, most: int
    ) -> tuple[list[Decoded], int]:
        """One worker call's worth of history (at most ``most`` files): the budget
        keeps memory bounded."""
        batch: list[Decoded] = []
        size = 0
        position = start
        with self._thread_fd(thread) as (_, tfd):
            while tfd is not None and position < len(steps):
                if len(batch) == most or size >= _BATCH_BYTES:
                    return batch, position
                try:
                    found = thread_dir.read(tfd, thread, steps[position])
                    if found is not None:  # else pruned since the listing
                        batch.append(self._decode(thread, found))
                        size += len(found.data)
                except CheckpointCorrupted:
                    if not batch:
                        raise
                    return batch, position  # the whole steps before it first
                position += 1
        return batch, len(steps)

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        return await self._io("list_threads", self._thread_page, after, limit, status)

    def _thread_page(self, after: str, limit: int, status: ThreadStatus | None) -> list[ThreadInfo]:
        """Names from one listing (the namespace's, or the status index's), then one
        verified head (and record head) per thread returned."""
        base = self._base(create=False)
        if base is None:
            return []
        names = self._thread_names(base) if status is None else index.with_status(base, status)
        found: list[ThreadInfo] = []
        for thread in names[bisect.bisect_right(names, after) :]:
            if len(found) == limit:
                break
            if not usable(thread):
                continue
            info = self._summary(base, thread)
            if info is not None and status in (None, info.status):
                found.append(info)
            elif status is not None:
                self._repair_thread(base, thread, ThreadState(status, None))
        return found

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        return await self._io("list_due", self._list_due, now_us, after, limit)

    def _list_due(self, now_us: int, after: tuple[int, str] | None, limit: int) -> list[ThreadInfo]:
        base = self._base(create=False)
        if base is None:
            return []
        found: list[ThreadInfo] = []
        for wake_us, thread in index.due(base, now_us, after):
            if not usable(thread):
                continue
            info = self._summary(base, thread)
            if info is None or ThreadState.of_info(info).wake_us != wake_us:
                self._repair_thread(base, thread, ThreadState("waiting", wake_us))
                continue
            found.append(info)
            if len(found) == limit:
                break
        return found

    def _repair_thread(self, base: int, thread: str, stale: ThreadState) -> None:
        """Remove an index entry a killed writer left, if under the thread's lock it
        still does not match the thread's latest step and record."""
        with self._lock(thread):
            index.retire(base, stale, self._state(base, thread), thread)

    # -- deletes --------------------------------------------------------------

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        check_thread(thread)
        if before_step is None and cutoff_us is None:
            return await self._io("delete_thread", self._delete, thread)
        return await self._io("prune", self._prune, thread, before_step, cutoff_us)

    def _delete(self, thread: str) -> int:
        base = self._base(create=False)
        if base is None:
            return 0
        with self._lock(thread):
            return self._drop_steps(base, thread)

    def _drop_steps(self, base: int, thread: str) -> int:
        """Delete every step (the caller holds the thread's lock): one rename makes
        it atomic, readers see all of the thread or none of it."""
        tfd = thread_dir.open_thread(base, thread)
        if tfd is None:
            return 0
        try:
            count = len(thread_dir.steps(tfd))
            try:
                found = thread_dir.latest(tfd, thread, whole=False)
                entries = [] if found is None else [found.state(self._run_status(thread))]
            except CheckpointCorrupted:  # its entries are unknown: every status's
                entries = [ThreadState(status, None) for status in get_args(ThreadStatus)]
        finally:
            os.close(tfd)
        self._discard(base, thread)
        for entry in entries:
            index.retire(base, entry, None, thread)
        return count

    def _prune(self, thread: str, before_step: int | None, cutoff_us: int | None) -> int:
        with self._thread_fd(thread, locked=True) as (base, tfd):
            if tfd is None:
                return 0
            removed, kept = thread_dir.prune(
                base,
                tfd,
                thread,
                before_step=before_step,
                cutoff_us=cutoff_us,
                modes=self._modes,
                run_status=self._run_status(thread),
            )
            if removed and not kept and rmdir(base, thread):  # only when nothing is left
                os.fsync(base)
        return removed

    @contextlib.contextmanager
    def _thread_fd(self, thread: str, *, locked: bool = False) -> Iterator[tuple[int, int | None]]:
        """The namespace's and the thread's directories (-1 and None when missing),
        under the thread's lock if ``locked``."""
        base = self._base(create=False)
        if base is None:
            yield -1, None
            return
        with self._lock(thread) if locked else contextlib.nullcontext():
            tfd = thread_dir.open_thread(base, thread)
            try:
                yield base, tfd
            finally:
                if tfd is not None:
                    os.close(tfd)
