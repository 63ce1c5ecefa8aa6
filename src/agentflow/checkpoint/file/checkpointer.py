"""A file store on the local file system: a thread's steps, record and events, for one host.

Under one ``root`` (one :class:`~agentflow.checkpoint.file.directories.StoreDirectories`:
the descriptors, the lock stripes, the cursor secret), each namespace holds
its threads' step files (:mod:`~agentflow.checkpoint.file.steps`), their
durable records (:mod:`~agentflow.checkpoint.file.runs`) and the event log
(:mod:`~agentflow.checkpoint.file.events`), under one layout version
(:mod:`~agentflow.checkpoint.file.layout`). A thread and its record share
one lock, so what crosses the parts runs under one lock hold: a step commit
(the record's write, then the step's: two renames, see :meth:`_commit_step`)
and a thread's deletion. Every call goes through directory descriptors and
never follows a symbolic link (:mod:`~agentflow.checkpoint.file.fs`).
docs/file.md has the design.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.base import Redactor, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.file import index, layout
from agentflow.checkpoint.file import thread as thread_dir
from agentflow.checkpoint.file.directories import StoreDirectories
from agentflow.checkpoint.file.events import EVENTS_LOCK, FileEvents
from agentflow.checkpoint.file.fs import listdir, opened
from agentflow.checkpoint.file.index import Modes
from agentflow.checkpoint.file.layout import DURABLE
from agentflow.checkpoint.file.runs import FileRuns
from agentflow.checkpoint.file.steps import FileSteps
from agentflow.checkpoint.file.thread import NAME_MAX, check_thread, usable
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.store_base import StoreBase
from agentflow.checkpoint.stores import local_path
from agentflow.checkpoint.validation import validate_thread
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import (
    AgentflowError,
    CheckpointError,
    InvalidArgument,
    InvalidStoreUrl,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["FileCheckpointer", "from_url"]

_NAMESPACES: Final = ".ns"
_TRASH: Final = ".trash"
#: Errors no retry fixes: the store's files are not ours to write.
_DENIED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_P = ParamSpec("_P")
_T = TypeVar("_T")


class FileCheckpointer(FileRuns, FileEvents, FileSteps, StoreBase):
    """Checkpoints, durable records and events as files under ``root`` (a Store);
    safe for many processes on one host.

    Compare-and-set and revision counting hold across processes because each
    writer holds its thread's ``flock``; ``flock`` is local to one kernel, so
    do not share a store over NFS. With ``secure_permissions`` (the default)
    files are ``0o600`` and directories ``0o700``, and a ``root`` writable by
    its group or others is refused (:class:`~agentflow.errors.InvalidArgument`
    from the first call); ``secure_permissions=False`` leaves modes to the
    umask. A thread id must be one file name: no leading ``.``, no ``/`` or
    ``\\``, at most 255 bytes of UTF-8. A namespace may be at most 127 bytes
    of UTF-8 (its directory name is its hex). ``sealing`` (a key ring) seals
    checkpoints, records and events. With ``create=False`` a missing ``root``
    raises :class:`~agentflow.errors.StoreNotFound` on the first call and
    nothing is created; reads never create anything.
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
        sealing: KeyRing | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
        self._root = os.path.abspath(os.fspath(root))
        self._modes = Modes(0o700, 0o600) if secure_permissions else Modes(0o777, 0o666)
        where: tuple[str, ...] = ()
        if self._namespace:
            encoded = self._namespace.encode().hex()
            if len(encoded) > NAME_MAX:
                raise InvalidArgument(f"namespace over {NAME_MAX // 2} bytes of UTF-8")
            where = (_NAMESPACES, encoded)
        self._dirs = StoreDirectories(
            self._root, where, self._modes, secure_permissions, create_root=bool(create)
        )
        #: Whether this store has checked (or migrated) the namespace's layout.
        self._ready = False
        self._checking = threading.Lock()

    def __repr__(self) -> str:
        return f"FileCheckpointer({self._root!r}, namespace={self.namespace!r})"

    @property
    def root(self) -> str:
        """The absolute directory holding the store (all namespaces)."""
        return self._root

    @property
    def database(self) -> str:
        return f"file://{os.path.realpath(self._root)}"

    async def _io(
        self, operation: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        try:
            return await asyncio.to_thread(self._dirs.run, functools.partial(fn, *args, **kwargs))
        except Exception as exc:
            self._reraise(exc, operation)

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        if not isinstance(exc, OSError):
            return None
        message = f"{operation} on file store {self._root}: {exc.strerror or exc}"
        return CheckpointError(message) if exc.errno in _DENIED else StoreUnavailable(message)

    # -- the namespace and its layout ------------------------------------------

    def _base(self, create: bool) -> int | None:
        base = self._dirs.base(create)
        if base is not None and not self._ready:
            with self._checking:  # one migration per process at a time: its threads wait
                if not self._ready:
                    self._check_layout(base, create)
        return base

    def _check_layout(self, base: int, create: bool) -> None:
        rebuild = layout.pending(base, self._dirs.inner(DURABLE, create=False), self._root)
        if rebuild is not None:
            found = self._thread_names(base)
            if not create and not found and self._dirs.inner(DURABLE, create=False) is None:
                return  # nothing to migrate, and a reader writes no layout file
            self._migrate(base, found, rebuild)
            durable = self._dirs.inner(DURABLE, create=True)
            assert durable is not None
            layout.mark(base, durable, self._modes)
        self._ready = True

    def _migrate(self, base: int, threads: list[str], rebuild: bool) -> None:
        """Put each thread's status marker where its latest step and record say, under
        its lock. With ``rebuild`` (no layout file: written before the indexes
        existed, or deleted by an operator to rebuild them) the heads go too, as
        a writer of an older version leaves them stale; each thread's next write
        makes a new one. Other markers a store of the old layout left are extra
        entries, which listings remove."""
        for thread in filter(usable, threads):
            with self._dirs.locked(thread):
                tfd = thread_dir.open_thread(base, thread)
                if tfd is None:
                    continue
                try:
                    if rebuild:
                        thread_dir.drop_head(tfd)
                    found = thread_dir.latest(tfd, thread, whole=False)
                finally:
                    os.close(tfd)
                if found is not None:
                    state = found.state(self._run_status(thread))
                    index.add(base, state, thread, self._modes)
                    index.retire(base, found.state(), state, thread)

    def _lock(self, *names: str) -> contextlib.AbstractContextManager[None]:
        self._base(create=True)  # a migration takes locks: never under these
        return self._dirs.locked(*names)

    @contextlib.contextmanager
    def _within(self, parts: tuple[str, ...], create: bool) -> Iterator[int | None]:
        durable = None if self._base(create) is None else self._dirs.inner(DURABLE, create)
        if durable is None:
            yield None
            return
        mode = self._modes.directory if create else None
        with opened(durable, parts, "the store's .durable directory", mode) as fds:
            yield None if fds is None else (fds[-1] if fds else durable)

    def _discard(self, parent: int, name: str) -> None:
        trash = self._dirs.inner(_TRASH, create=True)
        assert trash is not None
        os.rename(name, secrets.token_hex(8), src_dir_fd=parent, dst_dir_fd=trash)
        os.fsync(parent)
        for left in listdir(trash, (), "the store's trash"):
            # This one, and what a delete killed before its removal left: anyone's to finish.
            shutil.rmtree(left, dir_fd=trash, onerror=_gone)

    @contextlib.contextmanager
    def _marking(
        self, key: str, before: ThreadStatus | None, after: ThreadStatus | None
    ) -> Iterator[None]:
        base = None if before == after or not usable(key) else self._dirs.base(create=False)
        tfd = None if base is None else thread_dir.open_thread(base, key)
        try:
            found = None if tfd is None else thread_dir.latest(tfd, key, whole=False)
        finally:
            if tfd is not None:
                os.close(tfd)
        if base is None or found is None:  # no step: no marker
            yield
            return
        old, new = found.state(before), found.state(after)
        index.add(base, new, key, self._modes)
        yield
        index.retire(base, old, new, key)

    # -- what crosses the parts ------------------------------------------------

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """Under the thread's lock: check that the step is new, write the record
        (guarded), then the step. A refusal writes nothing; a crash between the
        two renames leaves the record written and the step not, which the
        record's revision tells (the default order: never a step without its
        receipts)."""
        check_thread(thread)
        return await self._io("commit_step", self._commit_both, encode, write)

    def _commit_both(
        self, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        enc = encode()
        base = self._base(create=True)
        assert base is not None
        written: list[DurableCheckpoint] = []
        with self._lock(enc.thread):
            found = self._put_locked(base, enc, 0, lambda: written.append(self._write(write)))
        return found, written[0] if written else write.record

    async def delete_thread(self, thread: str, *, force: bool = False) -> None:
        self._check_open()
        check_thread(validate_thread(thread))
        await super().delete_thread(thread, force=force)

    async def _delete_thread(self, thread: str, force: bool) -> bool:
        return await self._io("delete", self._drop_thread, thread, force)

    def _drop_thread(self, thread: str, force: bool) -> bool:
        """The record (refused on a live lease), the events, then the steps, under the
        thread's lock and the event log's: one lock hold, three renames or unlinks
        (a delete killed midway is finished by the next one)."""
        base = self._base(create=False)
        if base is None:
            return False
        with self._lock(thread, EVENTS_LOCK):
            found = self._drop_run(thread, force)
            found = self._drop_events(thread) > 0 or found
            return (usable(thread) and self._drop_steps(base, thread) > 0) or found

    # -- lifecycle -------------------------------------------------------------

    async def _cursor_secret(self) -> bytes:
        return await self._io("cursor", self._dirs.secret)

    async def _close_store(self) -> None:
        await asyncio.to_thread(self._dirs.release)


def _gone(function: object, path: str, info: tuple[Any, BaseException, Any]) -> None:
    """Another delete removed it first."""
    if not isinstance(info[1], FileNotFoundError):
        raise info[1]


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    sealing: KeyRing | None = None,
    create: bool = True,
) -> FileCheckpointer:
    """``file://DIR``: the directory follows the scheme directly (``file:///abs/dir``)."""
    path = local_path(url)
    if path is None:
        raise InvalidStoreUrl(f"store URL {url!r} is not a file:// URL")
    return FileCheckpointer(path, namespace=namespace, codec=codec, sealing=sealing, create=create)
