"""The file store's records: one directory per run beside the thread's step files.

A run is a directory ``.durable/runs/<name>/`` (see
:mod:`~agentflow.checkpoint.file.names`) holding a small head file and
immutable part files (:mod:`~agentflow.checkpoint.file.heads`). Every write
holds the lock of the run's key, which is its thread's lock, so a record
write and a step write of one thread never interleave; it checks its guard
against the head it reads under the lock and commits by one atomic rename
of a new head (:mod:`~agentflow.checkpoint.file.rundir`): compare-and-set
holds across the processes of one host. A claim, a renewal and an
acknowledgement rewrite only the head; a journal transition writes one entry
file and the head; a body is written only when it changed.

Two indexes follow each write, both as empty files that a writer adds
before its head commits and removes after (a kill leaves at most an extra
entry, which listings check and remove under the lock): the run's status
(``.durable/status/<status>/<name>``, for ``list_runs(status=)``), and,
when the record starts or stops imposing a thread status
(``reconciliation_required``, ``failed``), the thread's status marker
(:meth:`FileRuns._marking`).

Leases run on this machine's wall clock, read under the run's lock: every
process on one host agrees on who holds a run. ``flock`` is local to one
kernel, so the store is for one host (not NFS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Final, ParamSpec, TypeVar

from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.file.directories import FileParts
from agentflow.checkpoint.file.fs import opened
from agentflow.checkpoint.file.heads import StoredHead, planned, stored_of
from agentflow.checkpoint.file.layout import DURABLE
from agentflow.checkpoint.file.names import add_entry, drop_entry, key_of, key_path, walk
from agentflow.checkpoint.file.rundir import (
    PartMissing,
    check_body,
    commit,
    read_head,
    read_row,
    sweep,
)
from agentflow.checkpoint.plans import Write, refusal
from agentflow.checkpoint.rows import summary_of
from agentflow.checkpoint.runs import RunsBase
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import CheckpointAlreadyExists, ClaimActive, DurableError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["RUNS", "FileRuns"]

RUNS: Final = "runs"
_STATUS: Final = "status"
#: Reads without the lock before one under it, when writers keep replacing parts.
_UNLOCKED_READS: Final = 2
_P = ParamSpec("_P")
_T = TypeVar("_T")


class FileRuns(FileParts, RunsBase):
    """The record part of :class:`~agentflow.checkpoint.file.FileCheckpointer`."""

    # -- directories ----------------------------------------------------------

    @contextlib.contextmanager
    def _run_dir(self, key: str, create: bool) -> Iterator[int | None]:
        """The run's directory (made when ``create``), None when missing."""
        with self._within((RUNS,), create) as runs:
            if runs is None:
                yield None
                return
            with self._run_in(runs, key, create) as run:
                yield run

    @contextlib.contextmanager
    def _run_in(self, runs: int, key: str, create: bool) -> Iterator[int | None]:
        what = f"the directory of run {key!r}"
        mode = self._modes.directory if create else None
        with opened(runs, key_path(key), what, mode) as fds:
            yield None if fds is None else fds[-1]

    def _head_of(self, key: str) -> StoredHead | None:
        with self._run_dir(key, create=False) as run:
            return None if run is None else read_head(run, key)

    def _index(self, status: CheckpointStatus, key: str, *, add: bool) -> None:
        with self._within((_STATUS, status.value), add) as index:
            if index is not None:
                if add:
                    add_entry(index, key, self._modes)
                else:
                    drop_entry(index, key)

    def _commit(
        self, run: int, old: StoredHead | None, new: StoredHead, files: dict[str, bytes]
    ) -> None:
        """Commit ``new`` (under the run's lock), keeping both indexes supersets."""
        before = None if old is None else old.head.status
        moved = before is not new.head.status
        with self._marking(new.key, _imposed(before), _imposed(new.head.status)):
            if moved:
                self._index(new.head.status, new.key, add=True)
            commit(run, old, new, files, self._modes)
            if moved and before is not None:
                self._index(before, new.key, add=False)

    # -- create, load, delete -------------------------------------------------

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        row = self._parts.encode_row(checkpoint)
        await self._io("create", self._create, *stored_of(row))

    def _create(self, stored: StoredHead, files: dict[str, bytes]) -> None:
        with self._lock(stored.key), self._run_dir(stored.key, create=True) as run:
            assert run is not None
            if read_head(run, stored.key) is not None:
                raise CheckpointAlreadyExists(f"a record exists under {stored.key!r}")
            self._commit(run, None, stored, files)

    async def load(self, key: str) -> DurableCheckpoint | None:
        self._check_open()
        return await self._io("load", self._load, validate_checkpoint_key(key))

    def _load(self, key: str) -> DurableCheckpoint | None:
        for _ in range(_UNLOCKED_READS):
            with contextlib.suppress(PartMissing):  # a writer committed meanwhile
                return self._read(key, locked=False)
        with self._lock(key):
            return self._read(key, locked=True)

    def _read(self, key: str, *, locked: bool) -> DurableCheckpoint | None:
        with self._run_dir(key, create=False) as run:
            stored = None if run is None else read_head(run, key)
            if run is None or stored is None:
                return None
            return self._parts.decode_row(read_row(run, stored, locked=locked))

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        return await self._io("delete", self._locked_call, (key,), self._drop_run, key, force)

    def _drop_run(self, key: str, force: bool) -> bool:
        """Delete the record (under its lock), unless a live lease holds it and not
        ``force``. A damaged head is no lease: its run is deleted, every index
        entry it may have with it."""
        *branches, leaf = key_path(key)
        with self._within((RUNS, *branches), create=False) as parent:
            if parent is None:
                return False
            with self._run_dir(key, create=False) as run:
                if run is None:
                    return False
                try:
                    stored = read_head(run, key)
                except DurableError:
                    stored, statuses = None, list(CheckpointStatus)
                else:
                    statuses = [] if stored is None else [stored.head.status]
            if not statuses:
                return False
            lease = None if stored is None else stored.head.lease_expires_at_ms
            if not force and lease is not None and lease > wall_clock_ms():
                raise ClaimActive(f"run {key!r} is held by a live lease; delete it with force")
            before = None if stored is None else _imposed(stored.head.status)
            with self._marking(key, before, None):
                self._discard(parent, leaf)
                for status in statuses:
                    self._index(status, key, add=False)
        return True

    # -- claims ---------------------------------------------------------------

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        self._check_open()
        check_claim_request(cycle_index, claim_token, lease_ms)
        if not claim_token.isascii():
            try:
                claim_token.encode()
            except UnicodeEncodeError as exc:
                raise DurableError(
                    "checkpoint_claim_invalid", "claim token is not valid Unicode"
                ) from exc
        key = validate_checkpoint_key(key)
        return await self._io("claim", self._claim, key, cycle_index, claim_token, lease_ms, mode)

    def _claim(
        self, key: str, cycle: int, token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        with self._lock(key), self._run_dir(key, create=False) as run:
            stored = None if run is None else read_head(run, key)
            now = wall_clock_ms()
            error = claim_refusal(None if stored is None else stored.head, cycle, now, mode)
            if error is not None:
                raise error
            assert run is not None and stored is not None
            head = claimed_head(stored.head, cycle, token, now_ms=now, lease_ms=lease_ms, mode=mode)
            claimed = replace(read_row(run, stored, locked=True), head=head)
            # Damaged parts raise before anything is written.
            record = self._parts.decode_row(claimed)
            if mode is ClaimMode.RECOVERY:  # its last holder may have died writing
                sweep(run, stored)
            self._commit(run, stored, replace(stored, head=head), {})
            return record

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        self._check_open()
        check_claim_request(1, claim_token, lease_ms)
        key = validate_checkpoint_key(key)
        return await self._io("renew_claim", self._renew, key, claim_token, lease_ms)

    def _renew(self, key: str, token: str, lease_ms: int) -> int:
        with self._lock(key), self._run_dir(key, create=False) as run:
            stored = None if run is None else read_head(run, key)
            now = wall_clock_ms()
            error = renew_refusal(None if stored is None else stored.head, token, now)
            if error is not None:
                raise error
            assert run is not None and stored is not None
            expiry = now + lease_ms
            if expiry > MAX_WIRE_INTEGER:
                raise DurableError(
                    "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
                )
            head = replace(stored.head, lease_expires_at_ms=expiry)
            commit(run, stored, replace(stored, head=head), {}, self._modes)
            return expiry

    # -- planned writes -------------------------------------------------------

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as one head rename under the run's lock."""
        return await self._io(operation, self._locked_call, (write.key,), self._write, write)

    def _write(self, write: Write) -> DurableCheckpoint:
        """``write`` applied (the caller holds the run's lock), or its refusal raised."""
        with self._run_dir(write.key, create=False) as run:
            stored = None if run is None else read_head(run, write.key)
            if stored is None or not write.guard.holds(stored.head):
                raise refusal(None if stored is None else stored.head, write.guard)
            assert run is not None
            if write.body is None:
                check_body(run, stored)
            new, files = planned(stored, write)
            self._commit(run, stored, new, files)
        return replace(write.record, lease_expires_at_ms=new.head.lease_expires_at_ms)

    # -- listing --------------------------------------------------------------

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        runs = await self._io("list_runs", self._read_runs, status, after, limit)
        return runs[:limit], runs[limit - 1].key if len(runs) > limit else None

    def _read_runs(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> list[RunSummary]:
        """Names from one index walk, then one head per run returned (and one peek)."""
        parts = (RUNS,) if status is None else (_STATUS, status.value)
        found: list[RunSummary] = []
        with (
            self._within((RUNS,), create=False) as runs,
            self._within(parts, create=False) as index,
        ):
            if runs is None or index is None:
                return found
            start = None if after is None else after.encode().hex()
            for encoded in walk(index, start):
                key = key_of(encoded)
                if key is None:
                    continue
                with self._run_in(runs, key, create=False) as run:
                    stored = None if run is None else read_head(run, key)
                head = None if stored is None else stored.head
                if head is not None and status in (None, head.status):
                    found.append(summary_of(key, head))
                    if len(found) > limit:
                        break
                elif status is not None:
                    self._repair_run(key, status)
        return found

    def _repair_run(self, key: str, status: CheckpointStatus) -> None:
        """Drop an index entry a killed writer left, if under the run's lock it is still stale."""
        with self._lock(key):
            stored = self._head_of(key)
            if stored is None or stored.head.status is not status:
                self._index(status, key, add=False)

    def _run_status(self, key: str) -> ThreadStatus | None:
        """The thread status ``key``'s record imposes (None: none, or no record).

        Read past the layout check (a migration asks it), from the held ``.durable``.
        """
        durable = self._dirs.inner(DURABLE, create=False)
        if durable is None:
            return None
        with opened(durable, (RUNS, *key_path(key)), f"the directory of run {key!r}") as fds:
            stored = None if fds is None else read_head(fds[-1], key)
        return None if stored is None else _imposed(stored.head.status)


def _imposed(status: CheckpointStatus | None) -> ThreadStatus | None:
    return None if status is None else run_thread_status(status)
