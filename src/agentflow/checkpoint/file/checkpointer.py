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
import fcntl
import functools
import hashlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final, Literal, NamedTuple, ParamSpec, TypeVar, get_args, overload

from agentflow.checkpoint.backend import CheckpointerBase, EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import Checkpoint, Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.file import index
from agentflow.checkpoint.file.directories import StoreDirectories
from agentflow.checkpoint.file.format import (
    HEADER_MAX,
    Header,
    header_bytes,
    parse,
    payload_of,
    step_name,
    step_of,
)
from agentflow.checkpoint.file.fs import (
    create_file,
    link_refused,
    link_replace,
    make_dir,
    open_dir,
    publish,
    read_file,
    rmdir,
    unlink,
    write_all,
)
from agentflow.checkpoint.file.index import LAYOUT_VERSION, Modes, ThreadState
from agentflow.checkpoint.validation import is_unicode
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    InvalidThreadId,
    StoreUnavailable,
)

__all__ = ["FileCheckpointer", "from_url"]

#: First character of every name the store invents; thread ids may not start with it.
_MARKER: Final = "."
_NAMESPACES: Final = ".ns"
_HEAD: Final = ".head"
_SECRET: Final = ".cursor-secret"
_TEMP_SUFFIX: Final = ".tmp"
_TRASH: Final = ".trash-"
#: The longest file name (bytes) on ext4, xfs, btrfs, tmpfs and APFS.
_NAME_MAX: Final = 255
_LOCK_STRIPES: Final = 1024
#: ``history`` decodes at most this many files, or about this many bytes, per worker call:
#: enough to amortise the thread hop, few enough that the cyclic GC does not keep
#: rescanning a batch of live states (64 files decode at half the speed of 8).
_BATCH_FILES: Final = 8
_BATCH_BYTES: Final = 1 << 20
#: Errors no retry fixes: the store's files are not ours to write.
_DENIED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_P = ParamSpec("_P")
_T = TypeVar("_T")


def _path_safe(thread: str) -> bool:
    """One plain file name, never one the store invents: no separator of any OS."""
    return (
        not thread.startswith(_MARKER)
        and "/" not in thread
        and "\\" not in thread
        and len(thread.encode()) <= _NAME_MAX
    )


def _check_thread(thread: str) -> str:
    if not _path_safe(thread):
        raise InvalidThreadId(
            f"thread id {thread!r} must be one file name: not starting with {_MARKER!r}, "
            f"without '/' or '\\\\', at most {_NAME_MAX} bytes of UTF-8"
        )
    return thread


def _usable(name: str) -> bool:
    """Whether a name found on disk is a thread id the API accepts."""
    return is_unicode(name) and _path_safe(name)


def _thread(thread: str) -> str:
    return f"the directory of thread {thread!r}"


class _Latest(NamedTuple):
    """A thread's latest step file as read: its header, bytes and payload offset."""

    step: int
    header: Header
    data: bytes
    start: int


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
    of UTF-8 (its directory name is its hex).
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
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec)
        self._root = os.path.abspath(os.fspath(root))
        self._secure = secure_permissions
        self._modes = Modes(0o700, 0o600) if secure_permissions else Modes(0o777, 0o666)
        self._parts: tuple[str, ...] = ()
        if self._namespace:
            encoded = self._namespace.encode().hex()
            if len(encoded) > _NAME_MAX:
                raise InvalidArgument(f"namespace over {_NAME_MAX // 2} bytes of UTF-8")
            self._parts = (_NAMESPACES, encoded)
        self._dirs = StoreDirectories(self._root, self._parts, self._modes, secure_permissions)
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
        """Index every thread of a namespace written before the indexes existed."""
        for thread in filter(_usable, self._thread_names(base)):
            with self._locked(base, thread):
                state = self._state(base, thread)
                if state is not None:
                    index.add(base, state, thread, self._modes)
        index.mark_complete(base, self._modes)

    @contextlib.contextmanager
    def _locked(self, base: int, thread: str) -> Iterator[None]:
        """Hold the thread's exclusive lock; the kernel drops it if the process dies."""
        digest = hashlib.blake2b(thread.encode(), digest_size=8).digest()
        stripe = f"{int.from_bytes(digest, 'big') % _LOCK_STRIPES:03x}"
        what = f"the lock of thread {thread!r}"
        fd = create_file(self._dirs.locks(base), stripe, os.O_RDWR, what, self._modes.file)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _thread_dir(self, base: int, thread: str) -> int | None:
        return open_dir(base, thread, _thread(thread))

    def _thread_names(self, base: int) -> list[str]:
        """Every thread directory of the namespace (and any link in place of one)."""
        with os.scandir(base) as entries:
            return sorted(
                entry.name
                for entry in entries
                if not entry.name.startswith(_MARKER)
                and (entry.is_dir(follow_symlinks=False) or entry.is_symlink())
            )

    # -- reading steps -------------------------------------------------------

    def _latest(self, tfd: int, thread: str, whole: bool) -> _Latest | None:
        """The thread's latest step: its head if the head is that step's file, else
        the highest step listed that still exists."""
        limit = None if whole else HEADER_MAX
        head = read_file(tfd, _HEAD, f"the head of thread {thread!r}", limit)
        if head is not None:
            data, opened_head = head
            with contextlib.suppress(CheckpointCorrupted, FileNotFoundError):
                header, start = parse(data, thread, None)
                if header.step is not None:
                    named = os.stat(step_name(header.step), dir_fd=tfd, follow_symlinks=False)
                    if (named.st_ino, named.st_dev) == (opened_head.st_ino, opened_head.st_dev):
                        return _Latest(header.step, header, data, start)
        for step in sorted(_listed_steps(tfd), reverse=True):
            found = read_file(tfd, step_name(step), f"thread {thread!r} step {step}", limit)
            if found is not None:  # else pruned since the listing
                header, start = parse(found[0], thread, step)
                return _Latest(step, header, found[0], start)
        return None

    def _summary(self, base: int, thread: str) -> ThreadInfo | None:
        tfd = self._thread_dir(base, thread)
        if tfd is None:
            return None
        try:
            latest = self._latest(tfd, thread, whole=False)
        finally:
            os.close(tfd)
        return None if latest is None else latest.header.info(thread, latest.step)

    def _state(self, base: int, thread: str) -> ThreadState | None:
        info = self._summary(base, thread)
        return None if info is None else ThreadState.of(info)

    def _decode(
        self, thread: str, step: int, header: Header, data: bytes, start: int
    ) -> Checkpoint:
        payload = payload_of(data, start, thread, step)
        return self._decode_row(thread, StoredRow(step, header.revision, payload))

    def _read_file(self, tfd: int, thread: str, step: int) -> tuple[Checkpoint, int] | None:
        found = read_file(tfd, step_name(step), f"thread {thread!r} step {step}")
        if found is None:
            return None
        data = found[0]
        header, start = parse(data, thread, step)
        return self._decode(thread, step, header, data, start), len(data)

    # -- the hooks -----------------------------------------------------------

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        _check_thread(thread)
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
        with self._locked(base, thread):
            tfd = make_dir(base, thread, _thread(thread), self._modes.directory)
            try:
                stored = self._header(tfd, thread, step)
                current = stored.revision if stored else 0
                if if_revision is not None and if_revision != current:
                    return current
                before = self._latest(tfd, thread, whole=False)
                latest = before is None or step >= before.step
                old = None if before is None else _state_of(thread, before)
                new = ThreadState.of(enc.summary())
                if latest and new != old:
                    index.add(base, new, thread, self._modes)
                self._write(tfd, enc, current + 1, latest)
                if latest and old is not None:
                    index.retire(base, old, new, thread)
            finally:
                os.close(tfd)
        return None

    def _write(self, tfd: int, enc: EncodedCheckpoint, revision: int, latest: bool) -> None:
        """Readers see the old file or the new one, never a mix; on return both the
        bytes and the rename survive a power loss. The head moves first, so a
        kill between the two renames leaves a head that names a step it is not
        (which readers detect), never a stale head that looks right."""
        temp = f"{_MARKER}{enc.step}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        what = f"a temp file of thread {enc.thread!r}"
        fd = create_file(tfd, temp, os.O_WRONLY | os.O_EXCL, what, self._modes.file)
        try:
            try:
                write_all(fd, (header_bytes(enc, revision), enc.payload, b"}"))
                os.fsync(fd)
            finally:
                os.close(fd)
            if latest:
                link_replace(tfd, temp, _HEAD)
            os.replace(temp, step_name(enc.step), src_dir_fd=tfd, dst_dir_fd=tfd)
        except BaseException:
            unlink(tfd, temp)
            raise
        os.fsync(tfd)

    async def _read_step(self, thread: str, step: int | None) -> Checkpoint | None:
        _check_thread(thread)
        return await self._io(self._get, thread, step)

    def _get(self, thread: str, step: int | None) -> Checkpoint | None:
        with self._thread_fd(thread) as tfd:
            if tfd is None:
                return None
            if step is not None:
                read = self._read_file(tfd, thread, step)
                return None if read is None else read[0]
            latest = self._latest(tfd, thread, whole=True)
            return None if latest is None else self._decode(thread, *latest)

    async def _read_history(self, thread: str) -> AsyncIterator[Checkpoint]:
        _check_thread(thread)
        steps = sorted(await self._io(self._steps, thread))
        start = 0
        while start < len(steps):
            batch, start = await self._io(self._read_batch, thread, steps, start)
            for cp in batch:
                yield cp

    def _steps(self, thread: str) -> set[int]:
        with self._thread_fd(thread) as tfd:
            return set() if tfd is None else _listed_steps(tfd)

    def _read_batch(
        self, thread: str, steps: list[int], start: int
    ) -> tuple[list[Checkpoint], int]:
        """One worker call's worth of history: the budget keeps memory bounded."""
        batch: list[Checkpoint] = []
        size = 0
        position = start
        with self._thread_fd(thread) as tfd:
            if tfd is None:  # deleted since the listing
                return batch, len(steps)
            while position < len(steps) and len(batch) < _BATCH_FILES and size < _BATCH_BYTES:
                try:
                    read = self._read_file(tfd, thread, steps[position])
                except CheckpointCorrupted:
                    if not batch:
                        raise
                    break  # yield the whole steps before it; the next call raises
                position += 1
                if read is not None:  # else pruned since the listing
                    batch.append(read[0])
                    size += read[1]
        return batch, position

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
            if not _usable(thread):
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
            if not _usable(thread):
                continue
            info = self._summary(base, thread)
            entry = ThreadState("waiting", wake_us)
            if info is None or ThreadState.of(info) != entry:
                self._repair(base, thread, entry)
                continue
            found.append(info)
            if len(found) == limit:
                break
        return found

    def _repair(self, base: int, thread: str, stale: ThreadState) -> None:
        """Remove an index entry a killed writer left, if under the thread's lock it
        still does not match the thread's latest step."""
        with self._locked(base, thread):
            index.retire(base, stale, self._state(base, thread), thread)

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        _check_thread(thread)
        if before_step is None and cutoff_us is None:
            return await self._io(self._delete, thread)
        return await self._io(self._prune, thread, before_step, cutoff_us)

    def _delete(self, thread: str) -> int:
        """Renaming first makes the deletion atomic: readers see all or nothing."""
        base = self._namespace_dir(create=False)
        if base is None:
            return 0
        with self._locked(base, thread):
            tfd = self._thread_dir(base, thread)
            if tfd is None:
                return 0
            try:
                count = len(_listed_steps(tfd))
                try:
                    latest = self._latest(tfd, thread, whole=False)
                    entries = [] if latest is None else [_state_of(thread, latest)]
                except CheckpointCorrupted:  # its entries are unknown: every status's
                    entries = [ThreadState(status, None) for status in get_args(ThreadStatus)]
            finally:
                os.close(tfd)
            trash = f"{_TRASH}{secrets.token_hex(8)}"
            os.rename(thread, trash, src_dir_fd=base, dst_dir_fd=base)
            os.fsync(base)
            for entry in entries:
                index.retire(base, entry, None, thread)
        shutil.rmtree(trash, dir_fd=base)
        return count

    def _prune(self, thread: str, before_step: int | None, cutoff_us: int | None) -> int:
        base = self._namespace_dir(create=False)
        if base is None:
            return 0
        with self._locked(base, thread):
            tfd = self._thread_dir(base, thread)
            if tfd is None:
                return 0
            try:
                removed, kept = self._prune_in(base, tfd, thread, before_step, cutoff_us)
            finally:
                os.close(tfd)
            if removed and not kept and rmdir(base, thread):  # only when nothing is left
                os.fsync(base)
        return removed

    def _prune_in(
        self, base: int, tfd: int, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> tuple[int, int]:
        """Remove the matching steps; return how many went and how many are left."""
        steps: list[int] = []
        temps: list[str] = []
        with os.scandir(tfd) as entries:
            for entry in entries:
                if entry.name.startswith(_MARKER) and entry.name.endswith(_TEMP_SUFFIX):
                    temps.append(entry.name)
                elif (step := step_of(entry.name)) is not None:
                    if entry.is_symlink():
                        raise link_refused(f"thread {thread!r} step {step}")
                    steps.append(step)
        for temp in temps:
            unlink(tfd, temp)  # dead: no write runs under our lock
        steps.sort()
        doomed = {step for step in steps if self._doomed(tfd, thread, step, before_step, cutoff_us)}
        kept = [step for step in steps if step not in doomed]
        if not doomed:
            return 0, len(kept)
        moves = steps[-1] in doomed
        old = new = None
        if moves:  # the head goes to the highest kept step before the latest goes
            old = self._step_state(tfd, thread, steps[-1])
            new = self._step_state(tfd, thread, kept[-1]) if kept else None
            if new is not None and new != old:
                index.add(base, new, thread, self._modes)
            if kept:
                link_replace(tfd, step_name(kept[-1]), _HEAD)
            else:
                unlink(tfd, _HEAD)
        removed = sum(unlink(tfd, step_name(step)) for step in sorted(doomed))
        os.fsync(tfd)
        if moves and old is not None:
            index.retire(base, old, new, thread)
        return removed, len(kept)

    def _doomed(
        self, tfd: int, thread: str, step: int, before_step: int | None, cutoff_us: int | None
    ) -> bool:
        if before_step is not None and step >= before_step:
            return False
        if cutoff_us is None:
            return True
        header = self._header(tfd, thread, step)
        return header is not None and header.ts_us < cutoff_us

    def _header(self, tfd: int, thread: str, step: int) -> Header | None:
        found = read_file(tfd, step_name(step), f"thread {thread!r} step {step}", HEADER_MAX)
        return None if found is None else parse(found[0], thread, step)[0]

    def _step_state(self, tfd: int, thread: str, step: int) -> ThreadState | None:
        header = self._header(tfd, thread, step)
        return None if header is None else ThreadState.of(header.info(thread, step))

    async def _cursor_secret(self) -> bytes:
        return await self._io(self._secret)

    def _secret(self) -> bytes:
        """32 random bytes in a ``0o600`` file at the root, shared by every namespace
        and process: :func:`~agentflow.checkpoint.file.fs.publish` lets one creator win."""
        what = "the store's cursor secret"
        root = self._dirs.root(create=True)
        found = read_file(root, _SECRET, what, SECRET_BYTES + 1)
        if found is None:
            publish(root, _SECRET, os.urandom(SECRET_BYTES), 0o600)
            found = read_file(root, _SECRET, what, SECRET_BYTES + 1)
        if found is None or len(found[0]) != SECRET_BYTES:
            raise CheckpointCorrupted(f"{what} is damaged")
        return found[0]

    async def _close_store(self) -> None:
        await asyncio.to_thread(self._dirs.release)

    @contextlib.contextmanager
    def _thread_fd(self, thread: str) -> Iterator[int | None]:
        """The thread's directory, or None when it (or the namespace) does not exist."""
        base = self._namespace_dir(create=False)
        tfd = None if base is None else self._thread_dir(base, thread)
        try:
            yield tfd
        finally:
            if tfd is not None:
                os.close(tfd)


def _listed_steps(tfd: int) -> set[int]:
    return {step for name in os.listdir(tfd) if (step := step_of(name)) is not None}


def _state_of(thread: str, latest: _Latest) -> ThreadState:
    return ThreadState.of(latest.header.info(thread, latest.step))


def from_url(url: str, *, namespace: str | None = None) -> FileCheckpointer:
    """``file://DIR``: the directory follows the scheme directly (``file:///abs/dir``)."""
    path = url.split("://", 1)[1]
    if not path:
        raise InvalidStoreUrl(f"store URL {url!r} names no directory")
    return FileCheckpointer(path, namespace=namespace)
