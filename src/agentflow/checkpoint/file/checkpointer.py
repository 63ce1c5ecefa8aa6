"""A durable checkpointer on the local file system: one file per step.

The default namespace keeps the seed's layout, ``root/<thread>/<step:06d>.json``;
a named one lives under ``root/.ns/<hex(namespace)>/``. Every name the store
invents starts with ``.`` and thread ids may not, so no thread id can name one
of them. Beside its steps a thread directory holds ``.head``, a hard link to
its latest step, which readers check (same file as the step it names) before
trusting it; a namespace holds the status and due indexes of
:mod:`~agentflow.checkpoint.file.index`. Writers of a thread hold its
``flock`` around read-revision-then-``os.replace``, so compare-and-set holds
across processes on one host; readers take no lock. Every call goes through
directory descriptors and never follows a symbolic link
(:mod:`~agentflow.checkpoint.file.fs`). docs/file.md has the design.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import functools
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final, Literal, ParamSpec, TypeVar, get_args, overload

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.file import index
from agentflow.checkpoint.file import thread as thread_dir
from agentflow.checkpoint.file.directories import StoreDirectories
from agentflow.checkpoint.file.format import (
    payload_of,
)
from agentflow.checkpoint.file.fs import (
    rmdir,
)
from agentflow.checkpoint.file.index import LAYOUT_VERSION, Modes, ThreadState
from agentflow.checkpoint.file.thread import MARKER, NAME_MAX, StepFile, check_thread, usable
from agentflow.checkpoint.stores import local_path
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreUnavailable,
)

__all__ = ["FileCheckpointer", "from_url"]

_NAMESPACES: Final = ".ns"
_TRASH: Final = ".trash-"
#: ``history`` decodes at most this many files, or about this many bytes, per worker call:
#: enough to amortise the thread hop, few enough that the cyclic GC does not keep
#: rescanning a batch of live states (64 files decode at half the speed of 8).
_BATCH_FILES: Final = 8
_BATCH_BYTES: Final = 1 << 20
#: Errors no retry fixes: the store's files are not ours to write.
_DENIED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_P = ParamSpec("_P")
_T = TypeVar("_T")


class FileCheckpointer(CheckpointerBase):
    """Checkpoints as files under ``root``; safe for many processes on one host.

    Compare-and-set and revision counting hold across processes because each
    writer holds the thread's ``flock``; ``flock`` is local to one kernel, so
    do not share a store over NFS. With ``secure_permissions`` (the default)
    files are ``0o600`` and directories ``0o700``, and a ``root`` writable by
    its group or others is refused (:class:`~agentflow.errors.InvalidArgument`
    from the first call); ``secure_permissions=False`` leaves modes to the
    umask. A thread id must be one file name: no leading ``.``, no ``/`` or
    ``\\``, at most 255 bytes of UTF-8. A namespace may be at most 127 bytes
    of UTF-8 (its directory name is its hex). With ``create=False`` a missing
    ``root`` raises :class:`~agentflow.errors.StoreNotFound` on the first call
    and nothing is created; reading writes no layout file into a directory
    that holds no threads.
    """

    kind = "file"

    def __init__(
        self,
        root: str | os.PathLike[str] = ".runs",
        *,
        redact: Redactor | None = None,
        secure_permissions: bool = True,
        namespace: str | None = None,
        codec: CheckpointCodec | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec)
        self._root = os.path.abspath(os.fspath(root))
        self._may_create = bool(create)
        self._secure = secure_permissions
        self._modes = Modes(0o700, 0o600) if secure_permissions else Modes(0o777, 0o666)
        self._parts: tuple[str, ...] = ()
        if self._namespace:
            encoded = self._namespace.encode().hex()
            if len(encoded) > NAME_MAX:
                raise InvalidArgument(f"namespace over {NAME_MAX // 2} bytes of UTF-8")
            self._parts = (_NAMESPACES, encoded)
        self._dirs = StoreDirectories(
            self._root, self._parts, self._modes, secure_permissions, create_root=self._may_create
        )
        #: Whether this checkpointer has checked (or migrated) the namespace's layout.
        self._ready = False

    def __repr__(self) -> str:
        return f"FileCheckpointer({self._root!r}, namespace={self.namespace!r})"

    @property
    def root(self) -> str:
        """The absolute directory holding the store (all namespaces)."""
        return self._root

    async def _io(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await asyncio.to_thread(self._dirs.run, functools.partial(fn, *args, **kwargs))

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        if not isinstance(exc, OSError):
            return None
        message = f"{operation} on file store {self._root}: {exc.strerror or exc}"
        return CheckpointError(message) if exc.errno in _DENIED else StoreUnavailable(message)

    # -- the store's directories ---------------------------------------------

    @overload
    def _namespace_dir(self, create: Literal[True]) -> int: ...

    @overload
    def _namespace_dir(self, create: bool) -> int | None: ...

    def _namespace_dir(self, create: bool) -> int | None:
        """The namespace's directory, its layout checked (None: it does not exist)."""
        base = self._dirs.base(create)
        if base is not None and not self._ready:
            self._check_layout(base)
        return base

    def _check_layout(self, base: int) -> None:
        version = index.layout_version(base)
        if version is None:
            if not self._may_create and not self._thread_names(base):
                return  # nothing to index, and a reader writes no layout file
            self._migrate(base)
        elif version > LAYOUT_VERSION:
            raise IncompatibleSchema(
                f"file store {self._root} has layout {version}; this agentflow reads up to "
                f"{LAYOUT_VERSION}: upgrade agentflow"
            )
        elif version < LAYOUT_VERSION:
            raise CheckpointCorrupted("the store's layout file is damaged")
        self._ready = True

    def _migrate(self, base: int) -> None:
        """Index every thread of a namespace without a layout file: one written before
        the indexes existed, or whose operator deleted the file to rebuild them. The
        heads go too (a writer of an older version leaves them stale); each thread's
        next write makes a new one."""
        for thread in filter(usable, self._thread_names(base)):
            with self._dirs.locked(thread):
                tfd = thread_dir.open_thread(base, thread)
                if tfd is None:
                    continue
                try:
                    thread_dir.drop_head(tfd)
                    found = thread_dir.latest(tfd, thread, whole=False)
                finally:
                    os.close(tfd)
                if found is not None:
                    index.add(base, found.state(), thread, self._modes)
        index.mark_complete(base, self._modes)

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
        return None if found is None else found.header.info(thread, found.step)

    def _state(self, base: int, thread: str) -> ThreadState | None:
        info = self._summary(base, thread)
        return None if info is None else ThreadState.of_info(info)

    def _decode(self, thread: str, found: StepFile) -> Checkpoint:
        payload = payload_of(found.data, found.start, thread, found.step)
        return self._decode_row(thread, StoredRow(found.step, found.header.revision, payload))

    # -- the hooks -----------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        check_thread(thread)
        return await self._io(self._put, thread, step, encode, if_revision)

    def _put(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        enc = encode()
        base = self._namespace_dir(create=True)
        with self._dirs.locked(thread):
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
                old = None if before is None else before.state()
                new = ThreadState.of(enc.interrupted, enc.done, enc.wake_at)
                if latest and new != old:  # the new entries first: never one missing
                    index.add(base, new, thread, self._modes)
                thread_dir.write(tfd, enc, current + 1, latest, self._modes.file)
                if latest and old is not None:
                    index.retire(base, old, new, thread)
            finally:
                os.close(tfd)
        return None

    async def _read_step(self, thread: str, step: int | None) -> Checkpoint | None:
        check_thread(thread)
        return await self._io(self._get, thread, step)

    def _get(self, thread: str, step: int | None) -> Checkpoint | None:
        with self._thread_fd(thread) as (_, tfd):
            if tfd is None:
                return None
            if step is None:
                found = thread_dir.latest(tfd, thread, whole=True)
            else:
                found = thread_dir.read(tfd, thread, step)
            return None if found is None else self._decode(thread, found)

    async def _read_history(self, thread: str) -> AsyncIterator[Checkpoint]:
        check_thread(thread)
        steps = sorted(await self._io(self._steps, thread))
        start = 0
        while start < len(steps):
            batch, start = await self._io(self._read_batch, thread, steps, start)
            for cp in batch:
                yield cp

    def _steps(self, thread: str) -> set[int]:
        with self._thread_fd(thread) as (_, tfd):
            return set() if tfd is None else thread_dir.steps(tfd)

    def _read_batch(
        self, thread: str, steps: list[int], start: int
    ) -> tuple[list[Checkpoint], int]:
        """One worker call's worth of history: the budget keeps memory bounded."""
        batch: list[Checkpoint] = []
        size = 0
        position = start
        with self._thread_fd(thread) as (_, tfd):
            while tfd is not None and position < len(steps):
                if len(batch) == _BATCH_FILES or size >= _BATCH_BYTES:
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
        return await self._io(self._list, after, limit, status)

    def _list(self, after: str, limit: int, status: ThreadStatus | None) -> list[ThreadInfo]:
        """Names from one listing (the namespace's, or the status index's), then one
        verified head per thread returned."""
        base = self._namespace_dir(create=False)
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
                self._repair(base, thread, ThreadState(status, None))
        return found

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        return await self._io(self._list_due, now_us, after, limit)

    def _list_due(self, now_us: int, after: tuple[int, str] | None, limit: int) -> list[ThreadInfo]:
        base = self._namespace_dir(create=False)
        if base is None:
            return []
        found: list[ThreadInfo] = []
        for wake_us, thread in index.due(base, now_us, after):
            if not usable(thread):
                continue
            info = self._summary(base, thread)
            entry = ThreadState("waiting", wake_us)
            if info is None or ThreadState.of_info(info) != entry:
                self._repair(base, thread, entry)
                continue
            found.append(info)
            if len(found) == limit:
                break
        return found

    def _repair(self, base: int, thread: str, stale: ThreadState) -> None:
        """Remove an index entry a killed writer left, if under the thread's lock it
        still does not match the thread's latest step."""
        with self._dirs.locked(thread):
            index.retire(base, stale, self._state(base, thread), thread)

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        check_thread(thread)
        if before_step is None and cutoff_us is None:
            return await self._io(self._delete, thread)
        return await self._io(self._prune, thread, before_step, cutoff_us)

    def _delete(self, thread: str) -> int:
        """Renaming first makes the deletion atomic: readers see all or nothing."""
        trash = f"{_TRASH}{secrets.token_hex(8)}"
        with self._thread_fd(thread, locked=True) as (base, tfd):
            if tfd is None:
                return 0
            count = len(thread_dir.steps(tfd))
            try:
                found = thread_dir.latest(tfd, thread, whole=False)
                entries = [] if found is None else [found.state()]
            except CheckpointCorrupted:  # its entries are unknown: every status's
                entries = [ThreadState(status, None) for status in get_args(ThreadStatus)]
            os.rename(thread, trash, src_dir_fd=base, dst_dir_fd=base)
            os.fsync(base)
            for entry in entries:
                index.retire(base, entry, None, thread)
        shutil.rmtree(trash, dir_fd=base)
        return count

    def _prune(self, thread: str, before_step: int | None, cutoff_us: int | None) -> int:
        with self._thread_fd(thread, locked=True) as (base, tfd):
            if tfd is None:
                return 0
            removed, kept = thread_dir.prune(
                base, tfd, thread, before_step=before_step, cutoff_us=cutoff_us, modes=self._modes
            )
            if removed and not kept and rmdir(base, thread):  # only when nothing is left
                os.fsync(base)
        return removed

    async def _cursor_secret(self) -> bytes:
        return await self._io(self._dirs.secret)

    async def _close_store(self) -> None:
        await asyncio.to_thread(self._dirs.release)

    @contextlib.contextmanager
    def _thread_fd(self, thread: str, *, locked: bool = False) -> Iterator[tuple[int, int | None]]:
        """The namespace's and the thread's directories (-1 and None when missing),
        under the thread's lock if ``locked``."""
        base = self._namespace_dir(create=False)
        if base is None:
            yield -1, None
            return
        with self._dirs.locked(thread) if locked else contextlib.nullcontext():
            tfd = thread_dir.open_thread(base, thread)
            try:
                yield base, tfd
            finally:
                if tfd is not None:
                    os.close(tfd)


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    create: bool = True,
) -> FileCheckpointer:
    """``file://DIR``: the directory follows the scheme directly (``file:///abs/dir``)."""
    path = local_path(url)
    if path is None:
        raise InvalidStoreUrl(f"store URL {url!r} is not a file:// URL")
    return FileCheckpointer(path, namespace=namespace, codec=codec, create=create)
