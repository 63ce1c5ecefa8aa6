"""What a file store holds for its directory: the root, the namespace, the locks.

One :class:`StoreDirectories` serves every part of a store (checkpoints,
records, events). Opening the directories once saves three ``open`` calls
per operation. Holding them is safe only while no call uses them after they
are closed, since a closed descriptor number is soon reused by some other
``open``: so every call runs through :meth:`StoreDirectories.run`, and
:meth:`release` waits for the calls in flight before it closes anything. The
root also keeps the store's cursor secret; the namespace, one lock file per
stripe of names (a thread and its record share one name, so one lock).
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Final, Literal, ParamSpec, TypeVar, overload

from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.file.fs import create_file, make_dir, open_dir, publish, read_file
from agentflow.checkpoint.file.index import Modes
from agentflow.errors import CheckpointCorrupted, InvalidArgument, StoreClosed, StoreNotFound

__all__ = ["FileParts", "StoreDirectories"]

_ROOT_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_LOCKS: Final = ".locks"
_LOCK_STRIPES: Final = 1024
_SECRET: Final = ".cursor-secret"
_T = TypeVar("_T")
_P = ParamSpec("_P")


class StoreDirectories:
    """Descriptors of ``root``, of ``root/parts...`` (the namespace) and of its
    lock directory, each opened (or created) on first use. Without
    ``create_root`` a missing root raises StoreNotFound, whatever the call."""

    def __init__(
        self,
        root: str,
        parts: tuple[str, ...],
        modes: Modes,
        secure: bool,
        *,
        create_root: bool = True,
    ) -> None:
        self._path = root
        self._create_root = create_root
        self._parts = parts
        self._modes = modes
        self._secure = secure
        self._opening = threading.Lock()
        self._idle = threading.Condition()
        self._busy = 0
        self._released = False
        self._root: int | None = None
        self._base: int | None = None
        self._locks: int | None = None
        self._held: dict[str, int] = {}

    def run(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, counted as in flight so that :meth:`release` waits for it."""
        with self._idle:
            if self._released:
                raise StoreClosed("this FileCheckpointer is closed")
            self._busy += 1
        try:
            return fn()
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def release(self) -> None:
        """Close every descriptor once the calls in flight are done."""
        with self._idle:
            self._released = True
            self._idle.wait_for(lambda: self._busy == 0)
        held = (self._root, self._base, self._locks, *self._held.values())
        for fd in {fd for fd in held if fd is not None}:
            os.close(fd)

    @overload
    def root(self, create: Literal[True]) -> int: ...

    @overload
    def root(self, create: bool) -> int | None: ...

    def root(self, create: bool) -> int | None:
        """The root (created when missing and ``create``), else None.

        With secure permissions a root that its group or others may write is
        refused: they could plant files (or links) in it.
        """
        if self._root is None:
            with self._opening:
                if self._root is None:
                    self._root = self._open_root(create)
        return self._root

    def _open_root(self, create: bool) -> int | None:
        try:
            fd = os.open(self._path, _ROOT_FLAGS)
        except FileNotFoundError:
            if not self._create_root:
                raise StoreNotFound(f"no store at {self._path}") from None
            if not create:
                return None
            parent, name = os.path.split(self._path)
            os.makedirs(parent, exist_ok=True)
            parent_fd = os.open(parent, _ROOT_FLAGS)
            try:
                fd = make_dir(parent_fd, name, "the store's root", self._modes.directory)
            finally:
                os.close(parent_fd)
        if self._secure and stat.S_IMODE(os.fstat(fd).st_mode) & 0o022:
            os.close(fd)
            raise InvalidArgument(
                f"file store root {self._path} is writable by its group or others, so they could "
                "plant files in it: remove that (chmod go-w) or pass secure_permissions=False"
            )
        return fd

    @overload
    def base(self, create: Literal[True]) -> int: ...

    @overload
    def base(self, create: bool) -> int | None: ...

    def base(self, create: bool) -> int | None:
        """The namespace's directory (created when missing and ``create``), else None."""
        if self._base is None:
            root = self.root(create)
            if root is None:
                return None
            with self._opening:
                if self._base is None:
                    self._base = self._open_base(root, create)
        return self._base

    def _open_base(self, root: int, create: bool) -> int | None:
        what = "the namespace directory"
        fd = root
        for part in self._parts:
            if create:
                inner: int | None = make_dir(fd, part, what, self._modes.directory)
            else:
                inner = open_dir(fd, part, what)
            if fd != root:
                os.close(fd)
            if inner is None:
                return None
            fd = inner
        return fd

    def inner(self, name: str, create: bool) -> int | None:
        """The namespace's directory ``name`` (made when missing and ``create``), held
        until :meth:`release`; None when it (or the namespace) does not exist."""
        fd = self._held.get(name)
        if fd is None:
            base = self.base(create)
            if base is None:
                return None
            with self._opening:
                fd = self._held.get(name)
                if fd is None:
                    what = f"the store's {name} directory"
                    mode = self._modes.directory
                    fd = make_dir(base, name, what, mode) if create else open_dir(base, name, what)
                    if fd is not None:
                        self._held[name] = fd
        return fd

    @contextlib.contextmanager
    def locked(self, *names: str) -> Iterator[None]:
        """Hold the exclusive locks of ``names``; the kernel drops them if the process dies.

        Lock files live apart from thread directories and are never deleted, so
        no writer can hold a lock on an unlinked file while another locks its
        replacement; 1,024 stripes bound their number. The stripes of all
        ``names`` are taken at once, in stripe order, and each only once: two
        descriptors of one stripe in one process would wait for each other,
        and one order everywhere keeps processes from waiting in a circle.
        Callers never nest these blocks.
        """
        if self._locks is None:
            base = self.base(create=True)
            with self._opening:
                if self._locks is None:
                    what = "the lock directory"
                    self._locks = make_dir(base, _LOCKS, what, self._modes.directory)
        subject = names[0]  # what the call is about: a thread, or the event log
        what = f"the lock of {'' if subject.startswith('.') else 'thread '}{subject!r}"
        fds: list[int] = []
        try:
            for stripe in sorted({_stripe(name) for name in names}):
                fds.append(create_file(self._locks, stripe, os.O_RDWR, what, self._modes.file))
                fcntl.flock(fds[-1], fcntl.LOCK_EX)
            yield
        finally:
            for fd in fds:
                os.close(fd)

    def secret(self) -> bytes:
        """32 random bytes in a ``0o600`` file at the root, the same for every
        namespace and process: :func:`~agentflow.checkpoint.file.fs.publish`
        lets exactly one creator win."""
        what = "the store's cursor secret"
        root = self.root(create=True)
        found = read_file(root, _SECRET, what, SECRET_BYTES + 1)
        if found is None:
            publish(root, _SECRET, os.urandom(SECRET_BYTES), 0o600)
            found = read_file(root, _SECRET, what, SECRET_BYTES + 1)
        if found is None or len(found[0]) != SECRET_BYTES:
            raise CheckpointCorrupted(f"{what} is damaged")
        return found[0]


def _stripe(name: str) -> str:
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return f"{int.from_bytes(digest, 'big') % _LOCK_STRIPES:03x}"


class FileParts(abc.ABC):
    """What each part of a file store (steps, runs, events) reaches through the store."""

    _dirs: StoreDirectories
    _modes: Modes

    @abc.abstractmethod
    async def _io(
        self, operation: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``fn`` on a worker thread; failures become agentflow's errors for ``operation``."""

    @abc.abstractmethod
    def _base(self, create: bool) -> int | None:
        """The namespace's directory, its layout ready (None: it does not exist)."""

    @abc.abstractmethod
    def _lock(self, *names: str) -> contextlib.AbstractContextManager[None]:
        """The locks of ``names`` (a record's key is its thread's name), taken together
        once the layout is ready."""

    def _locked_call(
        self, names: tuple[str, ...], fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``fn`` under the locks of ``names``: a job for :meth:`_io`."""
        with self._lock(*names):
            return fn(*args, **kwargs)

    @abc.abstractmethod
    def _within(
        self, parts: tuple[str, ...], create: bool
    ) -> contextlib.AbstractContextManager[int | None]:
        """The directory ``.durable/parts...`` (made when ``create``), None when missing."""

    @abc.abstractmethod
    def _discard(self, parent: int, name: str) -> None:
        """Remove the directory ``name`` of ``parent`` whole, by one rename first."""

    @abc.abstractmethod
    def _marking(
        self, key: str, before: ThreadStatus | None, after: ThreadStatus | None
    ) -> contextlib.AbstractContextManager[None]:
        """Around a record write under ``key``'s lock that changes the thread status
        the record imposes from ``before`` to ``after``: the thread's new status
        marker before the write, the old one's removal after."""

    @abc.abstractmethod
    def _run_status(self, key: str) -> ThreadStatus | None:
        """The thread status ``key``'s record imposes (None: none, or no record)."""
