"""A :class:`~agentflow.durable.DurableStore` in the file checkpointer's store directory.

A run is a directory ``.durable/runs/<name>/`` (see
:mod:`~agentflow.durable.stores.file_names`) holding a small head file and
immutable part files (:mod:`~agentflow.durable.stores.file_rows`). Every
write holds the run's ``flock`` (the checkpointer's lock stripes), checks
its guard against the head it reads under the lock, and commits by one
atomic rename of a new head (:mod:`~agentflow.durable.stores.file_run`):
so compare-and-set holds across the processes of one host. A claim, a
renewal and an acknowledgement rewrite only the head; a journal transition
writes one entry file and the head; a body is written only when it changed.
Each status has an index (``.durable/status/<status>/<name>``, empty files):
a writer adds the new entry before its head commits and removes the old one
after, so a kill leaves at most an extra entry, which listings check
against the head and remove under the run's lock.

Leases run on this machine's wall clock, read under the run's lock: every
process on one host agrees on who holds a run. ``flock`` is local to one
kernel, so the store is for one host (not NFS); use a server store for
workers on several machines.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from agentflow.checkpoint.file import from_url as checkpointer_from_url
from agentflow.checkpoint.file.fs import listdir, opened
from agentflow.durable.canonical import MAX_WIRE_INTEGER
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import CheckpointAlreadyExists, DurableError
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.paged import ListedRuns
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunHead, RunSummary
from agentflow.durable.stores.file_base import FileStoreBase
from agentflow.durable.stores.file_names import add_entry, drop_entry, key_of, key_path, walk
from agentflow.durable.stores.file_rows import StoredHead, planned, stored_of
from agentflow.durable.stores.file_run import (
    PartMissing,
    check_body,
    commit,
    read_head,
    read_row,
    sweep,
)
from agentflow.durable.transitions import Write, refusal
from agentflow.durable.validators import validate_checkpoint_key

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["FileDurableStore", "from_url"]

_RUNS: Final = "runs"
_STATUS: Final = "status"
_TRASH: Final = "trash"
#: Reads without the lock before one under it, when writers keep replacing parts.
_UNLOCKED_READS: Final = 2


class FileDurableStore(PlannedWrites, ListedRuns, FileStoreBase):
    """Durable records of runs as files under ``root``, beside its checkpoints.

    Takes the arguments of :class:`~agentflow.checkpoint.file.FileCheckpointer`
    (``root``, ``secure_permissions``, ``namespace``); the durable directory
    is created by the first write. Safe for many processes on one host.
    """

    # -- directories ----------------------------------------------------------

    def _run_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        return self._locked(f"{_RUNS}/{key}")

    @contextlib.contextmanager
    def _run_dir(self, key: str, create: bool) -> Iterator[int | None]:
        """The run's directory (made when ``create``), None when missing."""
        with self._within((_RUNS,), create) as runs:
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
        """Commit ``new`` (under the run's lock), keeping the status index a superset."""
        moved = old is None or old.head.status is not new.head.status
        if moved:
            self._index(new.head.status, new.key, add=True)
        commit(run, old, new, files, self._modes)
        if moved and old is not None:
            self._index(old.head.status, new.key, add=False)

    # -- create, load, delete ---------------------------------------------------

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        await self._io("create", self._create, *stored_of(row))

    def _create(self, stored: StoredHead, files: dict[str, bytes]) -> None:
        with self._run_lock(stored.key), self._run_dir(stored.key, create=True) as run:
            assert run is not None
            if read_head(run, stored.key) is not None:
                raise CheckpointAlreadyExists(f"a record exists under {stored.key!r}")
            self._commit(run, None, stored, files)

    async def load(self, key: str) -> DurableCheckpoint | None:
        return await self._io("load", self._load, validate_checkpoint_key(key))

    def _load(self, key: str) -> DurableCheckpoint | None:
        for _ in range(_UNLOCKED_READS):
            with contextlib.suppress(PartMissing):  # a writer committed meanwhile
                return self._read(key, locked=False)
        with self._run_lock(key):
            return self._read(key, locked=True)

    def _read(self, key: str, *, locked: bool) -> DurableCheckpoint | None:
        with self._run_dir(key, create=False) as run:
            stored = None if run is None else read_head(run, key)
            if run is None or stored is None:
                return None
            return self._parts.decode_row(read_row(run, stored, locked=locked))

    async def delete(self, key: str) -> bool:
        return await self._io("delete", self._delete, validate_checkpoint_key(key))

    def _delete(self, key: str) -> bool:
        """Renaming the run's directory away first makes the deletion atomic."""
        *branches, leaf = key_path(key)
        with self._run_lock(key), self._within((_RUNS, *branches), create=False) as parent:
            if parent is None:
                return False
            with self._run_dir(key, create=False) as run:
                try:
                    stored = None if run is None else read_head(run, key)
                    statuses = [] if stored is None else [stored.head.status]
                except DurableError:  # its index entry is unknown: drop every status's
                    statuses = list(CheckpointStatus)
            if run is None or not statuses:
                return False
            with self._within((_TRASH,), create=True) as trash:
                assert trash is not None
                doomed = secrets.token_hex(8)
                os.rename(leaf, doomed, src_dir_fd=parent, dst_dir_fd=trash)
                os.fsync(parent)
                for status in statuses:
                    self._index(status, key, add=False)
                _remove_tree(trash, doomed)
                for left in listdir(trash, (), "the durable store's trash"):
                    # what a delete killed before its removal left: anyone's to finish
                    _remove_tree(trash, left)
        return True

    # -- claims -----------------------------------------------------------------

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
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
        with self._run_lock(key), self._run_dir(key, create=False) as run:
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
        check_claim_request(1, claim_token, lease_ms)
        key = validate_checkpoint_key(key)
        return await self._io("renew_claim", self._renew, key, claim_token, lease_ms)

    def _renew(self, key: str, token: str, lease_ms: int) -> int:
        with self._run_lock(key), self._run_dir(key, create=False) as run:
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

    # -- planned writes -----------------------------------------------------------

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        """Apply a planned write as one head rename under the run's lock."""
        lease = await self._io(operation, self._write, write)
        return replace(write.record, lease_expires_at_ms=lease)

    def _write(self, write: Write) -> int | None:
        with self._run_lock(write.key), self._run_dir(write.key, create=False) as run:
            stored = None if run is None else read_head(run, write.key)
            if stored is None or not write.guard.holds(stored.head):
                raise refusal(None if stored is None else stored.head, write.guard)
            assert run is not None
            if write.body is None:
                check_body(run, stored)
            new, files = planned(stored, write)
            self._commit(run, stored, new, files)
            return new.head.lease_expires_at_ms

    # -- listing ------------------------------------------------------------------

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        runs = await self._io("list_runs", self._read_runs, status, after, limit)
        return runs[:limit], runs[limit - 1].key if len(runs) > limit else None

    def _read_runs(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> list[RunSummary]:
        """Names from one index walk, then one head per run returned (and one peek)."""
        parts = (_RUNS,) if status is None else (_STATUS, status.value)
        found: list[RunSummary] = []
        with (
            self._within((_RUNS,), create=False) as runs,
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
                    found.append(RunSummary.of(key, head))
                    if len(found) > limit:
                        break
                elif status is not None:
                    self._repair(key, status)
        return found

    def _head(self, key: str) -> RunHead | None:
        with self._run_dir(key, create=False) as run:
            stored = None if run is None else read_head(run, key)
            return None if stored is None else stored.head

    def _repair(self, key: str, status: CheckpointStatus) -> None:
        """Drop an index entry a killed writer left, if under the run's lock it is still stale."""
        with self._run_lock(key):
            head = self._head(key)
            if head is None or head.status is not status:
                self._index(status, key, add=False)


def _remove_tree(trash: int, name: str) -> None:
    """Remove a run renamed into the trash; another delete may be removing it too."""

    def gone(function: object, path: str, info: tuple[Any, BaseException, Any]) -> None:
        if not isinstance(info[1], FileNotFoundError):
            raise info[1]

    shutil.rmtree(name, dir_fd=trash, onerror=gone)


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> FileDurableStore:
    """``file://DIR``, as the checkpointer's (``file:///abs/dir`` for an absolute directory)."""
    return FileDurableStore(
        checkpointer_from_url(url).root, namespace=namespace, create=create, sealing=sealing
    )
